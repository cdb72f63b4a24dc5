"""The base of the service's background threads: a step repeated until stopped.

Standard library only, below every package that has a loop (dispatch, pr_comments, service), so
that none of them imports another for it; `pipeline.service.runtime` makes the service's loops,
starts them in the app's lifespan and stops them when it ends.
"""

from __future__ import annotations

import logging
import threading

__all__ = ["Loop"]

log = logging.getLogger(__name__)


class Loop(threading.Thread):
    """A service thread: `step` again and again, pausing `period_s` after a step with nothing to do."""

    def __init__(self, name: str, period_s: float) -> None:
        super().__init__(name=name, daemon=True)
        self.period_s = period_s
        self.stopped = threading.Event()

    def step(self) -> bool:  # pragma: no cover - overridden
        """One pass of the loop's work; True when it did something (the next pass follows at once)."""
        raise NotImplementedError

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                busy = self.step()
            except Exception:
                log.exception("%s: step failed", self.name)
                busy = False
            if not busy:
                self.stopped.wait(self.period_s)

    def stop(self) -> None:
        """Ask the loop to end after its current step (a pause ends at once)."""
        self.stopped.set()
