"""Reports owed to GitHub for runs (`RunReport`): queued by the webhook with the run, posted by the
service's reporter once the run has ended (waiting -> posted, kept or failed; superseded when a newer
head of the pull request runs first). Nothing here commits: the caller owns the transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.results.store.models import DeviceClassRow, Job, Run, RunReport, utcnow

__all__ = ["OwedReport", "done_classes", "next_owed", "owe_report", "owed_report", "settle_report", "supersede",
           "waiting_reports"]


@dataclass(frozen=True)
class OwedReport:
    id: int
    run_id: str
    repository: str
    pull_request: int | None
    head_sha: str
    base_sha: str | None


def _owed(row: RunReport) -> OwedReport:
    return OwedReport(row.id, row.run_id, row.repository, row.pull_request, row.head_sha, row.base_sha)


def owe_report(session: Session, *, run_id: str, repository: str, head_sha: str, pull_request: int | None = None,
               base_sha: str | None = None, merge_base: str | None = None) -> None:
    """The run owes a report when it ends: on the pull request (`pull_request`), else on the commit."""
    session.add(RunReport(run_id=run_id, repository=repository, pull_request=pull_request, head_sha=head_sha,
                          base_sha=base_sha, merge_base=merge_base, state="waiting", created_at=utcnow()))


def waiting_reports(session: Session, *, repository: str, pull_request: int) -> list[OwedReport]:
    """The reports still owed for runs of the pull request."""
    return [_owed(r) for r in session.scalars(sa.select(RunReport).where(
        RunReport.repository == repository, RunReport.pull_request == pull_request, RunReport.state == "waiting"))]


def supersede(session: Session, report_ids: Sequence[int], *, reason: str) -> None:
    """Those reports will not be posted: a newer run replaces them."""
    if report_ids:
        session.execute(sa.update(RunReport).where(RunReport.id.in_(list(report_ids)))
                        .values(state="superseded", error=reason))


def owed_report(session: Session, report_id: int) -> OwedReport | None:
    row = session.get(RunReport, report_id)
    return _owed(row) if row is not None else None


def done_classes(session: Session, run_id: str) -> list[str]:
    """The device classes whose jobs of the run are done, by name."""
    return list(session.scalars(sa.select(DeviceClassRow.name).join(Job, Job.device_class_id == DeviceClassRow.id)
                                .where(Job.run_id == run_id, Job.status == "done").order_by(DeviceClassRow.name)))


def next_owed(session: Session) -> int | None:
    """The oldest report still owed whose run has ended (done or failed)."""
    return session.scalar(
        sa.select(RunReport.id).join(Run, RunReport.run_id == Run.id)
        .where(RunReport.state == "waiting", Run.status.in_(("done", "failed")))
        .order_by(RunReport.created_at).limit(1))


def settle_report(session: Session, report_id: int, *, state: str, error: str | None) -> None:
    """What came of a report still owed (posted, kept in the outbox, failed); one settled already stays so."""
    session.execute(sa.update(RunReport).where(RunReport.id == report_id, RunReport.state == "waiting")
                    .values(state=state, error=error, reported_at=utcnow()))
