"""Another process holding the host lock (`pipeline.host_lock`): a stand-in for a builder compiling
or an agent timing on this host's CPU, for the tests of what waits for them."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

_HOLDER = """
import sys
from pipeline import host_lock
with getattr(host_lock, sys.argv[1])(sys.argv[2], on_wait=lambda _: print("waiting", flush=True)):
    print("held", flush=True)
    sys.stdin.readline()
"""


class Holder:
    """Another process holding the lock (`compiling` or `cpu_timing`) until `release`; the constructor
    returns once it holds it, setting `waiting` if it had to wait for it first."""

    def __init__(self, kind: str, lock: Path, waiting: threading.Event | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _HOLDER, kind, str(lock)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line == "waiting":
            if waiting is not None:
                waiting.set()
            line = self.proc.stdout.readline().strip()
        assert line == "held", line
        self.released_at = float("inf")

    def release(self) -> None:
        assert self.proc.stdin is not None
        self.released_at = time.monotonic()
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.wait(timeout=10) == 0

    def release_if_held(self) -> None:
        """For a test's cleanup: release unless released already."""
        if self.proc.poll() is None:
            self.release()
