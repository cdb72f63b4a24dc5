"""The tests' `benchfarm` launcher (tests/helpers/cli_zygote.py) behaves as `python -m pipeline.cli`
where the tests rely on it: output, exit status, stdin, working directory and environment, a
forwarded signal, a killed launcher takes its command with it, and an environment read at start-up
(LD_PRELOAD, PYTHON*) gets a real interpreter."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import requests

from tests.helpers.cli_zygote import REAL_BENCHFARM, zygote_argv
from tests.helpers.farm import wait_for
from tests.helpers.live_server import free_port
from tests.helpers.suite_repo import GemmCase, gemm_suite_files, make_suite_repo


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    return env | {"BENCHFARM_HOME": str(home), **extra}


def test_output_and_exit_status_match_the_real_entry_point(tmp_path: Path) -> None:
    launched = zygote_argv()
    for args in (["--version"], ["no-such-command"], ["user", "create", "--name", "ada", "--password-stdin"]):
        answers = [subprocess.run([*command, *args], cwd=tmp_path, env=_env(tmp_path / name), input="a long password\n",
                                  capture_output=True, text=True, timeout=120)
                   for command, name in ((launched, "home-a"), (REAL_BENCHFARM, "home-b"))]
        zygote, real = answers
        assert (zygote.returncode, zygote.stdout.replace("home-a", "home-b")) == (real.returncode, real.stdout), args
        assert zygote.stderr.replace("home-a", "home-b") == real.stderr, args
    assert (tmp_path / "home-a" / "benchfarm.db").is_file()   # the command's environment (and stdin) were its own


def test_a_forwarded_signal_a_killed_launcher_and_a_start_up_environment(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, gemm_suite_files([GemmCase("alpha", 64, 64, 64)]), name="suite-repo")
    home = tmp_path / "home"
    lock = home / "up.lock"

    def up(**env: str) -> tuple[subprocess.Popen[bytes], int]:
        port = free_port()
        proc = subprocess.Popen([*zygote_argv(), "up", "--no-run", "--suite", str(repo / "kernels")], cwd=tmp_path,
                                env=_env(home, BENCHFARM_PORT=str(port), **env), stdout=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT)
        wait_for(lambda: _serving(port), 120, "up serving")
        return proc, int(lock.read_text().strip())

    proc, pid = up()
    assert pid != proc.pid   # the command is a process of its own, forked by the zygote
    proc.send_signal(signal.SIGINT)   # forwarded: `up` stops as after Ctrl-C and releases its lock
    assert proc.wait(timeout=60) == 0
    assert lock.read_text() == "" and not _alive(pid)

    proc, pid = up()
    proc.kill()   # the launcher dies at once: the command's group goes with it
    proc.wait(timeout=10)
    wait_for(lambda: not _alive(pid), 10, "the command killed with its launcher")

    proc, pid = up(PYTHONHASHSEED="1")   # read at start-up: the launcher execs the real entry point
    assert pid == proc.pid
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0


def _serving(port: int) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{port}/api/v1/runs", timeout=5).status_code == 200
    except requests.ConnectionError:
        return False


def _alive(pid: int) -> bool:
    """Running (not a zombie its waiter has yet to reap)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
