"""`python -I -S cli_launcher.py SOCKET ARGV...`: a `benchfarm ARGV...` command forked by the test
process's zygote (cli_zygote.py: what it gives and what it does not). The standard library only,
no site: this process starts in milliseconds. Without a zygote answering, or where the zygote
says so, it execs `python -m pipeline.cli ARGV...`."""

import array
import json
import os
import signal
import socket
import sys

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def _read(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def main() -> None:
    path, argv = sys.argv[1], sys.argv[2:]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        os.execv(sys.executable, [sys.executable, "-m", "pipeline.cli", *argv])
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:   # closed: the command gets /dev/null there
            fds.append(os.open(os.devnull, os.O_RDWR))
    body = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    conn.sendmsg([len(body).to_bytes(8, "big") + body],
                 [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])

    pending: list[int] = []
    child = [0]

    def forward(signum: int, _frame: object) -> None:
        if child[0]:
            try:
                os.kill(child[0], signum)
            except ProcessLookupError:
                pass
        else:
            pending.append(signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    child[0] = int.from_bytes(_read(conn, 8), "big")
    if child[0] == 0:   # the zygote's start-up environment is not this command's
        conn.close()
        os.execv(sys.executable, [sys.executable, "-m", "pipeline.cli", *argv])
    for signum in pending:
        os.kill(child[0], signum)
    status = int.from_bytes(_read(conn, 8), "big")
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


main()
