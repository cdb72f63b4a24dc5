"""Runs and jobs as the pages name and read them: an id from the start of it, what a run measured,
which device classes each run stored results on, and the jobs that ended (what the verdict cache warms)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.contracts.ids import CaseId
from pipeline.results.store import ingest
from pipeline.results.store.models import Case, CaseResultRow, Commit, DeviceClassRow, Job, Repository, Run

__all__ = ["SHORT_ID_MIN", "EndedJob", "QueuedRun", "commit_device_classes", "ended_jobs", "fail_unfinished", "first_done_of_newest_runs", "ids_starting_with",
           "last_finished_jobs", "queue_run", "result_classes_of_runs", "run_case_ids", "run_outcome"]

SHORT_ID_MIN = 4
"""Shortest id prefix a page accepts for a run or a job (pages show their first 12 characters)."""


def run_case_ids(session: Session, run_id: str) -> dict[str, set[CaseId]]:
    """device class -> the case ids the run's jobs stored results for (what the run did)."""
    found: dict[str, set[CaseId]] = {}
    rows = session.execute(
        sa.select(DeviceClassRow.name, Case.case_id).distinct()
        .join(Job, Job.device_class_id == DeviceClassRow.id)
        .join(CaseResultRow, CaseResultRow.job_id == Job.id).join(Case, Case.id == CaseResultRow.case_id)
        .where(Job.run_id == run_id))
    for device_class, case_id in rows:
        found.setdefault(device_class, set()).add(case_id)
    return found


def ids_starting_with(session: Session, kind: Literal["run", "job"], text: str) -> list[str]:
    """The run or job ids `text` names: itself when it is one, else those it is a prefix of
    (at least SHORT_ID_MIN characters; at most two are returned: two mean ambiguous)."""
    model: type[Run] | type[Job] = Run if kind == "run" else Job
    if session.get(model, text) is not None:
        return [text]
    if len(text) < SHORT_ID_MIN:
        return []
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return list(session.scalars(sa.select(model.id).where(model.id.like(escaped + "%", escape="\\"))
                                .order_by(model.id).limit(2)))


@dataclass(frozen=True)
class QueuedRun:
    run_id: str
    job_ids: dict[str, str]
    """device class -> the run's job on it"""


def queue_run(session: Session, *, repository: str, commit_sha: str, kind: str, device_classes: Sequence[str],
              cases: str | None = None, max_attempts: int | None = None, owner: str | None = None,
              created_at: datetime | None = None) -> QueuedRun:
    """A queued run of a recorded commit with one queued job per device class (`ingest.create_run`),
    each running `cases` (a glob; None: every case) in at most `max_attempts` claims (None: the
    store's default). `owner`: the local process that runs the jobs itself (`Job.owner`); `created_at`:
    when it was queued, by the caller's clock (default now)."""
    run = ingest.create_run(session, repository=repository, commit_sha=commit_sha, kind=kind,
                            device_classes=list(device_classes), owner=owner)
    if created_at is not None:
        run.created_at = created_at
    for job in run.jobs:
        job.cases = cases
        if max_attempts is not None:
            job.max_attempts = max_attempts
    session.flush()
    return QueuedRun(run.id, {j.device_class.name: j.id for j in run.jobs})


def fail_unfinished(session: Session, job_ids: Iterable[str], *, error: str) -> None:
    """Those of the jobs not done or failed yet fail with `error`."""
    for job_id in job_ids:
        job = session.get(Job, job_id)
        if job is not None and job.status not in ("done", "failed"):
            ingest.set_job_status(session, job_id=job_id, status="failed", error=error)


def run_outcome(session: Session, run_id: str) -> tuple[str, str | None] | None:
    """(status, error) of the run; None for a run the store does not have."""
    run = session.get(Run, run_id)
    return (run.status, run.error) if run is not None else None


def commit_device_classes(session: Session, *, repository: str, sha: str) -> list[str]:
    """The device classes that ran jobs for the commit, by name."""
    return list(session.scalars(
        sa.select(DeviceClassRow.name).distinct()
        .join(Job, Job.device_class_id == DeviceClassRow.id).join(Run, Job.run_id == Run.id)
        .join(Commit, Run.commit_id == Commit.id).join(Repository, Commit.repository_id == Repository.id)
        .where(Repository.name == repository, Commit.sha == sha).order_by(DeviceClassRow.name)))


def result_classes_of_runs(session: Session, run_ids: list[str]) -> dict[str, list[str]]:
    """run id -> the device classes its jobs stored results on, sorted; runs without results are left out."""
    classes: dict[str, list[str]] = {}
    with_results = (sa.select(Job.run_id, DeviceClassRow.name)
                    .join(DeviceClassRow, Job.device_class_id == DeviceClassRow.id)
                    .where(Job.run_id.in_(run_ids),
                           sa.exists().where(CaseResultRow.job_id == Job.id)).order_by(DeviceClassRow.name))
    for run_id, device_class in session.execute(with_results):
        classes.setdefault(run_id, []).append(device_class)
    return classes


def first_done_of_newest_runs(session: Session, runs: int) -> datetime | None:
    """When the first job of the `runs` newest runs to end done ended; None: none of them has."""
    newest = sa.select(Run.id).order_by(Run.created_at.desc(), Run.id).limit(runs).scalar_subquery()
    return session.scalar(sa.select(sa.func.min(Job.finished_at)).where(Job.run_id.in_(newest), Job.status == "done"))


def last_finished_jobs(session: Session) -> tuple[datetime | None, set[str]]:
    """When a job last finished (any status), and the ids of the jobs that finished then."""
    since = session.scalar(sa.select(sa.func.max(Job.finished_at)))
    return since, set(session.scalars(sa.select(Job.id).where(Job.finished_at == since))
                      if since is not None else [])


@dataclass(frozen=True)
class EndedJob:
    id: str
    finished_at: datetime
    repository: str
    sha: str
    device_class: str
    run_id: str


def ended_jobs(session: Session, since: datetime | None, *, limit: int = 50) -> list[EndedJob]:
    """Jobs done since `since` (inclusive; any time when None), in the order they finished: at most `limit`."""
    query = (sa.select(Job.id, Job.finished_at, Repository.name, Commit.sha, DeviceClassRow.name, Job.run_id)
             .join(Run, Job.run_id == Run.id).join(Commit, Run.commit_id == Commit.id)
             .join(Repository, Commit.repository_id == Repository.id)
             .join(DeviceClassRow, Job.device_class_id == DeviceClassRow.id)
             .where(Job.status == "done", Job.finished_at.is_not(None)))
    if since is not None:
        query = query.where(Job.finished_at >= since)
    rows = session.execute(query.order_by(Job.finished_at, Job.id).limit(limit))
    return [EndedJob(job_id, at, repository, sha, device_class, run_id)
            for job_id, at, repository, sha, device_class, run_id in rows if at is not None]
