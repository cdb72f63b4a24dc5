"""`benchfarm` commands for the tests without paying Python's imports each time.

A test process runs several hundred `benchfarm` commands; each spent ~0.9 CPU-s (on a slow host twice
that) importing the same modules before its first line of work, a sixth of the suite's CPU. The
tests start them through `BENCHFARM` instead of `python -m pipeline.cli`: a small launcher
(`cli_launcher.py`, the standard library only) asks this test process's *zygote*, a single-threaded
interpreter that has imported the pipeline once, to fork the command. The forked command is a real
process running the real `python -m pipeline.cli` (runpy, as `-m` does) in the launcher's working
directory, environment and file descriptors 0-2; the launcher forwards the signals it is sent, exits
as the command did (its code, or the same signal), and its death (SIGKILL included) kills the
command's process group. What it does not give: another network namespace (`ip netns exec`), a
process group shared with the launcher (a terminal's Ctrl-C reaches the launcher only; it forwards
the signal to the command alone) and the interpreter's start-up itself: tests of those start
`python -m pipeline.cli` (`REAL_BENCHFARM`).

Protocol on the zygote's Unix socket, per command: the launcher sends an 8-byte length, a JSON
request {argv, cwd, env} and its fds 0, 1, 2 (SCM_RIGHTS); a *waiter* forked by the zygote forks the
command, answers its pid (8 bytes), then its wait status (8 bytes) once it ends; pid 0: exec the real
entry point instead (an environment read at start-up, such as LD_PRELOAD, differs from the zygote's)."""

from __future__ import annotations

import array
import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping
from pathlib import Path

LAUNCHER = Path(__file__).with_name("cli_launcher.py")
REAL_BENCHFARM = [sys.executable, "-m", "pipeline.cli"]
"""The interpreter's own start-up: for the tests whose subject it is (signals to a process group,
another network namespace, the entry point itself)."""

_PRELOAD = ("pipeline.cli", "pipeline.local_pipeline", "pipeline.service.app", "pipeline.agents.agent",
            "pipeline.agents.run_job", "pipeline.results.store.db", "pipeline.build.bundle")
_started: dict[int, tuple[subprocess.Popen[bytes], str]] = {}
_lock = threading.Lock()


def benchfarm_argv() -> list[str]:
    """The argv prefix of a `benchfarm` command (`[*benchfarm_argv(), "run", ...]`), through this test
    process's zygote (started on first use; BENCHFARM_TEST_ZYGOTE=0: the real entry point)."""
    if os.environ.get("BENCHFARM_TEST_ZYGOTE") == "0":
        return list(REAL_BENCHFARM)
    return zygote_argv()


def zygote_argv() -> list[str]:
    """The launcher's argv prefix, whatever BENCHFARM_TEST_ZYGOTE says."""
    return [sys.executable, "-I", "-S", str(LAUNCHER), _zygote_socket()]


def _zygote_socket() -> str:
    with _lock:
        pid = os.getpid()
        if pid in _started and _started[pid][0].poll() is None:
            return _started[pid][1]
        path = os.path.join(tempfile.mkdtemp(prefix="bf-zygote-"), "socket")
        root = Path(__file__).resolve().parents[2]
        env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
        log = open(Path(path).with_name("zygote.log"), "wb")   # noqa: SIM115 (the zygote's, for its lifetime)
        proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.cli_zygote", path, str(pid)], cwd=root, env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 120
        while not os.path.exists(path):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the test zygote did not start: {Path(path).with_name('zygote.log').read_text()}")
            time.sleep(0.02)
        _started[pid] = (proc, path)
        atexit.register(_stop, proc)
        return path


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


# --- the zygote (python -m tests.helpers.cli_zygote SOCKET PARENT_PID) ---

def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    head, ancillary, _, _ = conn.recvmsg(8, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - (len(data) % fds.itemsize)])
    size = int.from_bytes(head, "big")
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise EOFError("the launcher closed its request")
        body += chunk
    return json.loads(body), list(fds)


def _run_command(request: dict, fds: list[int]) -> None:
    """In the forked command: become `python -m pipeline.cli ARGV` in the launcher's place; never returns."""
    import runpy

    code: object = 0
    try:
        os.setpgid(0, 0)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[0] = request["cwd"]
        if "numpy" in sys.modules:   # its global generator, seeded at start-up in a process of its own
            sys.modules["numpy"].random.seed()
        sys.argv = ["-m", *request["argv"]]
        runpy.run_module("pipeline.cli", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:
        traceback.print_exc()
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    except BaseException:  # noqa: BLE001 (as the interpreter does: print, exit 1)
        traceback.print_exc()
        code = 1
    _finish()
    if code is None:
        os._exit(0)
    if isinstance(code, int):
        os._exit(code & 0xFF)
    print(code, file=sys.stderr)
    _flush()
    os._exit(1)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _finish() -> None:
    """What the interpreter does at exit: join non-daemon threads, run atexit handlers, flush."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    atexit._run_exitfuncs()
    _flush()


_AT_START = ("LD_", "PYTHON", "MALLOC", "OPENBLAS_", "OMP_", "MKL_")
"""Variables read when a process or its interpreter starts: a command whose environment sets them
otherwise than the zygote's is started for real (the launcher execs `python -m pipeline.cli`)."""


def _read_at_start(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_AT_START)}


def _wait(conn: socket.socket) -> None:
    """The waiter: fork the command, report its pid, then its wait status; kill its group when the
    launcher goes away first (killed)."""
    try:
        request, fds = _receive(conn)
    except (OSError, EOFError, ValueError):
        os._exit(1)
    if _read_at_start(request["env"]) != _read_at_start(os.environ):   # e.g. LD_PRELOAD: exec, not fork
        conn.sendall((0).to_bytes(8, "big"))
        os._exit(0)
    pid = os.fork()
    if pid == 0:
        conn.close()
        _run_command(request, fds)
    for fd in fds:
        os.close(fd)
    conn.sendall(pid.to_bytes(8, "big"))
    pidfd = os.pidfd_open(pid)
    while True:
        ready, _, _ = select.select([pidfd, conn.fileno()], [], [])
        if pidfd in ready:
            break
        if conn.recv(1) == b"":   # the launcher died
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            break
    _, status = os.waitpid(pid, 0)
    try:
        conn.sendall(status.to_bytes(8, "big"))
    except OSError:
        pass
    os._exit(0)


def _reap() -> None:
    """Wait for the waiters that ended (their CPU, the commands' included, is counted as this
    process's children's, and so as the test process's)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _serve(path: str, parent: int) -> None:
    for name in _PRELOAD:
        __import__(name)
    assert threading.active_count() == 1, threading.enumerate()   # fork needs one thread
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(64)
    os.rename(path + ".tmp", path)
    while os.getppid() == parent:
        _reap()
        ready, _, _ = select.select([listener], [], [], 1.0)
        if not ready:
            continue
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            _wait(conn)
        conn.close()


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
