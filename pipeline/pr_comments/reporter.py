"""The service's reporter: when a run that owes a report (`RunReport`, queued by the webhook) has
ended, its verdict is posted on GitHub (the sticky comment on the pull request, edited in place by
later runs of the same pull request, and a check run or commit status), or kept in the outbox when
GitHub cannot be reached; kept reports are retried every `FLUSH_EVERY_S`."""

from __future__ import annotations

import logging
import time

from pipeline.config import Settings
from pipeline.loops import Loop
from pipeline.pr_comments.outbox import deliver, flush
from pipeline.pr_comments.report import Report, report_for_commit
from pipeline.results.store import reports
from pipeline.results.store.db import Engine, session_scope

__all__ = ["FLUSH_EVERY_S", "Reporter", "report_of_run"]

log = logging.getLogger(__name__)

FLUSH_EVERY_S = 60.0


def report_of_run(settings: Settings, engine: Engine, owed_id: int) -> Report:
    """The report of an ended run, on the device classes it ran on, against the base it was paired with."""
    with session_scope(engine) as session:
        owed = reports.owed_report(session, owed_id)
        if owed is None:
            raise LookupError(f"no run report {owed_id}")
        classes = reports.done_classes(session, owed.run_id)
        if not classes:
            raise LookupError(f"run {owed.run_id} has no finished job to report")
        return report_for_commit(session, settings=settings, repository=owed.repository, sha=owed.head_sha,
                                 pr=owed.pull_request, base_sha=owed.base_sha, device_classes=classes)


class Reporter(Loop):
    """Posts the reports of ended runs, one at a time, and flushes the outbox now and then."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        super().__init__("reporter", 1.0)
        self.settings, self.engine = settings, engine
        self._flushed = time.monotonic()

    def _next(self) -> int | None:
        with session_scope(self.engine) as session:
            return reports.next_owed(session)

    def step(self) -> bool:
        if time.monotonic() - self._flushed > FLUSH_EVERY_S:
            self._flushed = time.monotonic()
            for report, delivery in flush(self.settings):
                log.info("outbox: %s %s", report.key, "posted" if delivery.posted else f"kept ({delivery.error})")
        owed_id = self._next()
        if owed_id is None:
            return False
        state, error = "failed", None
        try:
            report = report_of_run(self.settings, self.engine, owed_id)
        except LookupError as exc:
            error = str(exc)
        else:
            delivery = deliver(report, self.settings)
            state, error = ("posted", None) if delivery.posted else ("kept", delivery.error)
            log.info("report %s: %s", report.key, f"{report.title} ({report.conclusion})" if delivery.posted
                     else f"kept in {delivery.kept_at}: {delivery.error}")
        with session_scope(self.engine) as session:
            reports.settle_report(session, owed_id, state=state, error=error)
        return True
