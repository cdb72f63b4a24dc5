"""A long step's progress as log lines: its first and last, and in between one every few seconds.

A build or a job calls its progress function at every compile, check or timing round; a terminal
shows each on a live bar, a log would drown in them, and showing only the first and the last leaves
it silent for as long as the step lasts (issue 34: `benchfarm up` said nothing during a 10 s build
and 36 s of timing). Standard library only: the agents, the builder and the service all use it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["PROGRESS_EVERY_S", "ProgressFn", "ProgressLines"]

ProgressFn = Callable[[str, int, int], None]
"""(what is being done, how many done, of how many)"""

PROGRESS_EVERY_S = 5.0
"""At most one line this often in the middle of a step."""


class ProgressLines:
    """A progress function that passes on to `emit` the first and the last call of each stage (its
    count running from 1 to its total) and, in between, at most one call every `every_s` seconds."""

    def __init__(self, emit: ProgressFn, every_s: float = PROGRESS_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.emit, self.every_s, self.clock = emit, every_s, clock
        self._last = float("-inf")
        self._lock = threading.Lock()   # a build reports from its pool's callbacks

    def __call__(self, description: str, done: int, total: int) -> None:
        now = self.clock()
        with self._lock:
            due = done <= 1 or done >= total or now - self._last >= self.every_s
            if due:
                self._last = now
        if due:
            self.emit(description, done, total)
