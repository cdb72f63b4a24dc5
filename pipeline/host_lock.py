"""One lock per host between benchfarm's compiles and its CPU timing.

A CPU device times on the cores a builder compiles on: a build beside it (the embedded service's
builder thread, a `benchfarm builder` or `benchfarm run` on the same host) slows whichever rounds
it overlaps, and an identical binary reads as changed. So timing on a CPU device holds the host's
lock alone, and compiles hold it together (several builds may share the cores, never with timing).
The lock is an `flock` on a file every process on the host opens (`MeasurementSettings.host_lock`),
so it needs no server and goes with the process that held it, however that process ends. Timing
waits its turn: compiles that start while it waits queue behind it (`turnstile`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:   # not a POSIX host: no flock, so no lock (benchfarm's hosts are Linux)
    fcntl = None  # type: ignore[assignment]

DEFAULT_HOST_LOCK = "/tmp/benchfarm-host.lock"
"""In /tmp, not a user's data dir: the processes that contend for the cores may belong to several
users and configurations."""

_POLL_S = 0.1


class HostLockError(OSError):
    """The lock file cannot be opened; the message names it and the setting."""


@dataclass(frozen=True)
class Holder:
    """A process holding the lock, from /proc/locks (Linux)."""

    pid: int
    exclusive: bool
    command: str

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.command or '?'}, {'timing' if self.exclusive else 'compiling'})"


def holders(path: str) -> list[Holder]:
    """Who holds the lock now (empty where nobody does, or /proc/locks cannot be read)."""
    try:
        stat = os.stat(path)
        table = Path("/proc/locks").read_text()
    except OSError:
        return []
    key = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    found = []
    for line in table.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF"; waiters are listed with "->" and are not holders
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == key and fields[4].isdigit():
            pid = int(fields[4])
            found.append(Holder(pid, fields[3] == "WRITE", _command(pid)))
    return found


def _command(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    words = [Path(a.decode(errors="replace")).name if i == 0 else a.decode(errors="replace")
             for i, a in enumerate(argv[:3]) if a]
    text = " ".join(" ".join(words).split())
    return text if len(text) <= 60 else text[:59] + "…"


@contextmanager
def cpu_timing(path: str, *, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the host's lock alone while timing on a CPU device ('' : no lock)."""
    with _held(path, True, "a compile on this host", on_wait):
        yield


@contextmanager
def compiling(path: str, *, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the host's lock, shared with other compiles, while compiling ('' : no lock)."""
    with _held(path, False, "CPU timing on this host", on_wait):
        yield


def turnstile(path: str) -> str:
    """The second file of the lock: timing takes it before the lock and keeps it, and compiles pass
    through it, so compiles that come while timing waits queue behind it instead of joining the
    compiles it waits for (flock has no queue: a stream of overlapping compiles would starve it)."""
    return path + ".turnstile"


@contextmanager
def _held(path: str, exclusive: bool, holder: str, on_wait: Callable[[str], None] | None) -> Iterator[None]:
    if not path or fcntl is None:
        yield
        return
    gate, fd = _open(turnstile(path)), None
    try:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        wait = _Waiting(path, holder, on_wait)
        wait.acquire(gate, mode)
        fd = _open(path)
        wait.acquire(fd, mode)
        if not exclusive:   # compiles only pass through the turnstile
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield
    finally:
        for descriptor in (fd, gate):   # closing a descriptor releases its lock
            if descriptor is not None:
                os.close(descriptor)


@dataclass
class _Waiting:
    path: str
    holder: str
    on_wait: Callable[[str], None] | None
    said: bool = False

    def acquire(self, fd: int, mode: int) -> None:
        # Polled, not blocking: a waiting thread stays interruptible and an agent that gives up its job
        # (lease lost, stop) is not stuck in the kernel.
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if not self.said and self.on_wait is not None:
                    by_pid = {h.pid: h for h in holders(turnstile(self.path)) + holders(self.path)}
                    held_by = ", ".join(str(h) for h in by_pid.values())
                    self.on_wait(f"waiting for {self.holder} to finish ({self.path}{': ' + held_by if held_by else ''})")
                self.said = True
                time.sleep(_POLL_S)


def _open(path: str) -> int:
    try:
        return _open_or_create(path)
    except OSError as exc:
        raise HostLockError(
            f"cannot open the host lock {path}: {exc.strerror}; set BENCHFARM_MEASUREMENT__HOST_LOCK "
            "(measurement.host_lock) to a file every benchfarm process on this host can open, or to '' for none"
        ) from None


def open_check(path: str) -> None:
    """Open (or create) the lock's files and close them again: raises HostLockError as timing would."""
    if path:
        for name in (path, turnstile(path)):
            os.close(_open(name))


def _open_or_create(path: str) -> int:
    # Read-only is enough for flock. The file may belong to another user: in a sticky directory such as
    # /tmp an O_CREAT open of someone else's file is refused (protected_regular), so open first, create after.
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except PermissionError:   # another user's process created it meanwhile
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fchmod(fd, 0o644)   # readable by the other users' processes whatever our umask
    except OSError:
        pass
    return fd
