"""Read-side helpers for the web pages and the JSON API: small, typed, plain dataclasses out.

"Latest" and "history" follow commit time (committed_at), ties broken by storage order; when a
commit was measured more than once on a series, its newest measurement stands for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.results.models import Case, Commit, DeviceClassRow, Job, Measurement, Repository, Run, Series


@dataclass(frozen=True)
class RunSummary:
    id: str
    repository: str
    commit_sha: str
    kind: str
    status: str
    created_at: datetime
    finished_at: datetime | None
    job_count: int


@dataclass(frozen=True)
class JobSummary:
    id: str
    device_class: str
    status: str
    attempts: int
    error: str | None
    agent: str | None
    bundle_digest: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True)
class RunDetail:
    run: RunSummary
    error: str | None
    jobs: list[JobSummary]


@dataclass(frozen=True)
class SeriesSummary:
    id: int
    case_id: str
    device_class: str
    metric: str
    points: int
    latest_median: float | None
    latest_commit: str | None


@dataclass(frozen=True)
class HistoryPoint:
    sha: str
    committed_at: datetime
    median: float
    min: float
    max: float
    n: int


def _run_query() -> sa.Select[tuple[Run, str, str, int]]:
    job_count = (
        sa.select(sa.func.count(Job.id)).where(Job.run_id == Run.id).correlate(Run).scalar_subquery()
    )
    return (
        sa.select(Run, Repository.name, Commit.sha, job_count)
        .join(Repository, Run.repository_id == Repository.id)
        .join(Commit, Run.commit_id == Commit.id)
    )


def _run_summary(run: Run, repository: str, sha: str, jobs: int) -> RunSummary:
    return RunSummary(run.id, repository, sha, run.kind, run.status, run.created_at, run.finished_at, jobs)


def list_runs(session: Session, *, limit: int = 50) -> list[RunSummary]:
    """The newest runs first."""
    rows = session.execute(_run_query().order_by(Run.created_at.desc(), Run.id).limit(limit))
    return [_run_summary(*row) for row in rows]


def get_run(session: Session, run_id: str) -> RunDetail | None:
    """One run with its jobs; None when there is no such run."""
    row = session.execute(_run_query().where(Run.id == run_id)).one_or_none()
    if row is None:
        return None
    run = row[0]
    jobs = session.execute(
        sa.select(Job, DeviceClassRow.name).join(DeviceClassRow, Job.device_class_id == DeviceClassRow.id)
        .where(Job.run_id == run_id).order_by(DeviceClassRow.name)
    )
    return RunDetail(
        run=_run_summary(*row),
        error=run.error,
        jobs=[JobSummary(j.id, dc, j.status, j.attempts, j.error, j.agent, j.bundle_digest, j.created_at,
                         j.started_at, j.finished_at) for j, dc in jobs],
    )


def list_series(session: Session, *, limit: int = 500) -> list[SeriesSummary]:
    """Every series, by case id then device class, with its number of measured commits and the
    median at the newest of them."""
    return _series_summaries(session, limit=limit)


def get_series(session: Session, series_id: int) -> SeriesSummary | None:
    """One series' summary; None when there is no such series."""
    found = _series_summaries(session, limit=1, series_id=series_id)
    return found[0] if found else None


def _series_summaries(session: Session, *, limit: int, series_id: int | None = None) -> list[SeriesSummary]:
    ranked = (
        sa.select(
            Measurement.series_id, Measurement.median, Commit.sha,
            sa.func.row_number().over(
                partition_by=Measurement.series_id,
                order_by=(Commit.committed_at.desc(), Commit.id.desc(), Measurement.id.desc()),
            ).label("rank"),
        )
        .join(Commit, Measurement.commit_id == Commit.id)
        .subquery()
    )
    points = (
        sa.select(Measurement.series_id, sa.func.count(sa.distinct(Measurement.commit_id)).label("points"))
        .group_by(Measurement.series_id)
        .subquery()
    )
    rows = session.execute(
        sa.select(Series.id, Case.case_id, DeviceClassRow.name, Series.metric,
                  sa.func.coalesce(points.c.points, 0), ranked.c.median, ranked.c.sha)
        .join(Case, Series.case_id == Case.id)
        .join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id)
        .outerjoin(points, points.c.series_id == Series.id)
        .outerjoin(ranked, sa.and_(ranked.c.series_id == Series.id, ranked.c.rank == 1))
        .where(sa.true() if series_id is None else Series.id == series_id)
        .order_by(Case.case_id, DeviceClassRow.name, Series.metric)
        .limit(limit)
    )
    return [SeriesSummary(*row) for row in rows]


def series_history(session: Session, series_id: int) -> list[HistoryPoint]:
    """One point per measured commit, oldest commit first."""
    ranked = (
        sa.select(
            Measurement.commit_id, Measurement.median, Measurement.min, Measurement.max, Measurement.n,
            sa.func.row_number().over(partition_by=Measurement.commit_id, order_by=Measurement.id.desc()).label("rank"),
        )
        .where(Measurement.series_id == series_id)
        .subquery()
    )
    rows = session.execute(
        sa.select(Commit.sha, Commit.committed_at, ranked.c.median, ranked.c.min, ranked.c.max, ranked.c.n)
        .join(ranked, ranked.c.commit_id == Commit.id)
        .where(ranked.c.rank == 1)
        .order_by(Commit.committed_at, Commit.id)
    )
    return [HistoryPoint(*row) for row in rows]
