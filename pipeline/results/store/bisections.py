"""Bisections as stored, for the dispatcher that drives them (`pipeline.orchestration.dispatch.bisect`): requests
(one active per change point: a partial unique index), the automatic candidates, cancellation, and
a bisection as a plain record that the driver reads, changes and saves back (`load`, `save`); the
pages and the API read them through `bisect_views`. Nothing here commits: the caller owns the
transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, aliased

from pipeline.contracts.ids import CaseId
from pipeline.results.store import ingest
from pipeline.results.store.models import (
    Bisection,
    BisectionStep,
    BuildRequest,
    Case,
    CaseResultRow,
    ChangePoint,
    Commit,
    CommitParent,
    DeviceClassRow,
    Job,
    Repository,
    Series,
    TriageEvent,
    utcnow,
)
from pipeline.results.store.states import ACTIVE_BISECTION_STATES

__all__ = ["WHO", "BisectConflict", "BisectError", "BisectNotFound", "BisectionRecord", "StepRecord", "active_ids",
           "automatic_candidates", "cancel_retracted", "case_outcome", "change_point_of_series", "first_parents",
           "load", "note", "request", "running_count", "save"]


WHO = "benchfarm bisect"
"""Who requests automatic bisections and writes their outcome on the change point's history."""


class BisectError(ValueError):
    """A bisection that cannot be made (the message names the field and why): 422."""


class BisectNotFound(LookupError):
    """No such change point or series: 404."""


class BisectConflict(BisectError):
    """The change point is being bisected already: 409 (`bisection_id` names that one)."""

    def __init__(self, message: str, bisection_id: int) -> None:
        super().__init__(message)
        self.bisection_id = bisection_id


# --- requests ----------------------------------------------------------------------------------


def _active(session: Session, change_point_id: int) -> Bisection | None:
    return session.scalar(sa.select(Bisection).where(Bisection.change_point_id == change_point_id,
                                                     Bisection.state.in_(ACTIVE_BISECTION_STATES)))


def _sha(session: Session, commit_id: int) -> str:
    return str(session.scalar(sa.select(Commit.sha).where(Commit.id == commit_id)))


def _first_parent_sha(session: Session, commit_id: int) -> str | None:
    return session.scalar(sa.select(CommitParent.parent_sha).where(CommitParent.commit_id == commit_id,
                                                                   CommitParent.position == 0))


def request(session: Session, *, change_point_id: int, who: str, max_steps: int, max_device_s: float) -> int:
    """A queued bisection of the change point, bounded by `max_steps` jobs and `max_device_s` seconds
    of device time; its id. Raises BisectNotFound for an unknown change point, BisectConflict when
    one is active already, BisectError when there is nothing to bisect (retracted, or a range of
    one commit: that commit is the culprit)."""
    cp = session.get(ChangePoint, change_point_id)
    if cp is None:
        raise BisectNotFound(f"change_point_id: no change point {change_point_id}")
    if cp.lifecycle == "retracted":
        raise BisectError(f"change_point_id: change point {change_point_id} was retracted ({cp.reason}): "
                          "there is no change to bisect")
    active = _active(session, change_point_id)
    if active is not None:
        raise BisectConflict(f"change_point_id: change point {change_point_id} is being bisected already "
                             f"(bisection {active.id}, {active.state})", active.id)
    before, after = _sha(session, cp.before_commit_id), _sha(session, cp.after_commit_id)
    if _first_parent_sha(session, cp.after_commit_id) == before:
        raise BisectError(f"change_point_id: the range of change point {change_point_id} holds one commit, "
                          f"{after[:10]}: that commit made the change, there is nothing to bisect")
    series = session.get(Series, cp.series_id)
    assert series is not None
    repository_id = session.scalar(sa.select(Commit.repository_id).where(Commit.id == cp.after_commit_id))
    case_id = session.scalar(sa.select(Case.case_id).where(Case.id == series.case_id))
    bisection = Bisection(
        change_point_id=cp.id, repository_id=repository_id, device_class_id=series.device_class_id,
        cases=[str(case_id)], base_commit_id=cp.before_commit_id, bad_commit_id=cp.after_commit_id, commits=[],
        state="queued", result={}, summary="", reason="", max_steps=max_steps, max_device_s=max_device_s,
        device_s=0.0, requested_by=who, created_at=utcnow())
    try:
        with session.begin_nested():   # the partial unique index refuses a second active one
            session.add(bisection)
            session.flush()
    except IntegrityError:
        active = _active(session, change_point_id)
        raise BisectConflict(f"change_point_id: change point {change_point_id} is being bisected already",
                             active.id if active else 0) from None
    return bisection.id


def change_point_of_series(session: Session, series_id: int) -> int:
    """The change point a request naming a series bisects: its newest confirmed one (a suspected
    one when it has no confirmed one). Raises BisectNotFound / BisectError."""
    if session.get(Series, series_id) is None:
        raise BisectNotFound(f"series_id: no series {series_id}")
    # newest in history: its after commit's first-parent generation (one series: one line of history)
    generation = sa.select(Commit.generation).where(Commit.id == ChangePoint.after_commit_id).scalar_subquery()
    for lifecycle in ("confirmed", "suspected"):
        found = session.scalar(sa.select(ChangePoint.id).where(ChangePoint.series_id == series_id,
                                                               ChangePoint.lifecycle == lifecycle)
                               .order_by(generation.desc(), ChangePoint.committed_at.desc(), ChangePoint.id.desc())
                               .limit(1))
        if found is not None:
            return int(found)
    raise BisectError(f"series_id: series {series_id} has no confirmed or suspected change point to bisect")


def automatic_candidates(session: Session, *, now: datetime, within_h: float) -> list[int]:
    """The regressions confirmed in the last `within_h` hours over a range of more than one
    first-parent commit, with no bisection made since they were (last) confirmed and none active:
    their change point ids, oldest confirmation first."""
    since = now - timedelta(hours=within_h)
    made_since = sa.exists().where(Bisection.change_point_id == ChangePoint.id, sa.or_(
        Bisection.state.in_(ACTIVE_BISECTION_STATES), Bisection.created_at >= ChangePoint.confirmed_at))
    before = aliased(Commit)
    one_commit = sa.exists().where(CommitParent.commit_id == ChangePoint.after_commit_id, CommitParent.position == 0,
                                   CommitParent.parent_sha == before.sha)
    return list(session.scalars(
        sa.select(ChangePoint.id).join(before, ChangePoint.before_commit_id == before.id)
        .where(ChangePoint.lifecycle == "confirmed", ChangePoint.direction == "regression",
               ChangePoint.confirmed_at >= since, ~made_since, ~one_commit)
        .order_by(ChangePoint.confirmed_at, ChangePoint.id)).all())


# --- cancelling --------------------------------------------------------------------------------


def _cancel(session: Session, bisection: Bisection, reason: str) -> None:
    """Stop a bisection: its queued jobs fail ("cancelled: ...") and their builds are dropped; jobs
    already running finish and are left alone (their results are stored like any others)."""
    bisection.state, bisection.reason, bisection.finished_at = "cancelled", reason[:4000], utcnow()
    for step in bisection.steps:
        if step.state != "queued":
            continue
        step.state, step.verdict, step.reason, step.finished_at = "skipped", "cancelled", reason[:4000], utcnow()
        job = session.get(Job, step.job_id) if step.job_id else None
        if job is not None and job.status == "queued":
            ingest.set_job_status(session, job_id=job.id, status="failed", error=f"cancelled: {reason}"[:4000])
        if step.run_id:
            session.execute(sa.update(BuildRequest).where(BuildRequest.run_id == step.run_id,
                                                          BuildRequest.status == "pending")
                            .values(status="failed", error=f"cancelled: {reason}"[:4000], finished_at=utcnow()))
    note(session, bisection.change_point_id, f"bisection {bisection.id} cancelled: {reason}")


def cancel_retracted(session: Session) -> list[int]:
    """Cancel the active bisections whose change point the analysis retracted; their ids."""
    found = session.execute(
        sa.select(Bisection, ChangePoint.reason).join(ChangePoint, Bisection.change_point_id == ChangePoint.id)
        .where(Bisection.state.in_(ACTIVE_BISECTION_STATES), ChangePoint.lifecycle == "retracted")).all()
    for bisection, why in found:
        _cancel(session, bisection, f"its change point was retracted: {why}")
    return [b.id for b, _ in found]


def note(session: Session, change_point_id: int, text: str) -> None:
    """A triage event on the change point saying what its bisection did; its triage state kept."""
    cp = session.get(ChangePoint, change_point_id)
    if cp is not None:
        session.add(TriageEvent(change_point_id=cp.id, state=cp.state, who=WHO, at=utcnow(), note=text[:4000]))


# --- the record the driver works on --------------------------------------------------------------


@dataclass
class StepRecord:
    """One step of a bisection (`models.BisectionStep`), its commit as a sha; `id` None until saved."""

    position: int
    reading: int
    commit: str
    run_id: str | None
    job_id: str | None
    state: str = "queued"
    verdict: str | None = None
    change: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    pvalue: float | None = None
    paired: bool = False
    reason: str = ""
    device_s: float | None = None
    finished_at: datetime | None = None
    id: int | None = None


@dataclass
class BisectionRecord:
    """A bisection (`models.Bisection`) with its steps, by names and shas: what the driver reads and
    changes; `save` writes it back."""

    id: int
    change_point_id: int
    repository: str
    device_class: str
    cases: list[str]
    base: str
    bad: str
    commits: list[str]
    state: str
    outcome: str | None
    culprit: str | None
    result: dict[str, Any]
    summary: str
    reason: str
    max_steps: int
    max_device_s: float
    device_s: float
    started_at: datetime | None
    finished_at: datetime | None
    steps: list[StepRecord] = field(default_factory=list)


_STEP_FIELDS = ("state", "verdict", "change", "ci_low", "ci_high", "pvalue", "paired", "reason", "device_s",
                "finished_at")
_BISECTION_FIELDS = ("commits", "state", "outcome", "result", "summary", "reason", "device_s", "started_at",
                     "finished_at")


def load(session: Session, bisection_id: int, *, lock: bool = False) -> BisectionRecord | None:
    """The bisection with its steps; `lock`: its row locked until the transaction ends (PostgreSQL),
    so that two service processes never queue the same step twice."""
    bisection = session.get(Bisection, bisection_id,
                            with_for_update=lock and session.get_bind().dialect.name == "postgresql")
    if bisection is None:
        return None
    ids = {bisection.base_commit_id, bisection.bad_commit_id, *(s.commit_id for s in bisection.steps),
           *([bisection.culprit_commit_id] if bisection.culprit_commit_id else [])}
    shas = {i: sha for i, sha in session.execute(sa.select(Commit.id, Commit.sha).where(Commit.id.in_(sorted(ids))))}
    repository = session.scalar(sa.select(Repository.name).where(Repository.id == bisection.repository_id))
    device_class = session.scalar(sa.select(DeviceClassRow.name).where(DeviceClassRow.id == bisection.device_class_id))
    steps = [StepRecord(position=s.position, reading=s.reading, commit=shas[s.commit_id], run_id=s.run_id,
                        job_id=s.job_id, id=s.id, **{name: getattr(s, name) for name in _STEP_FIELDS})
             for s in bisection.steps]
    return BisectionRecord(
        id=bisection.id, change_point_id=bisection.change_point_id, repository=str(repository),
        device_class=str(device_class), cases=list(bisection.cases), base=shas[bisection.base_commit_id],
        bad=shas[bisection.bad_commit_id], commits=list(bisection.commits), state=bisection.state,
        outcome=bisection.outcome, culprit=shas[bisection.culprit_commit_id] if bisection.culprit_commit_id else None,
        result=dict(bisection.result), summary=bisection.summary, reason=bisection.reason,
        max_steps=bisection.max_steps, max_device_s=bisection.max_device_s, device_s=bisection.device_s,
        started_at=bisection.started_at, finished_at=bisection.finished_at, steps=steps)


def save(session: Session, record: BisectionRecord) -> None:
    """Write the record's changes back: the bisection's fields, its steps' and the steps it gained."""
    bisection = session.get(Bisection, record.id)
    assert bisection is not None
    for name in _BISECTION_FIELDS:
        value = getattr(record, name)
        if getattr(bisection, name) != value:
            setattr(bisection, name, list(value) if name == "commits" else dict(value) if name == "result" else value)
    if record.culprit is not None:
        bisection.culprit_commit_id = _commit_id(session, bisection.repository_id, record.culprit)
    stored = {s.id: s for s in bisection.steps}
    for step in record.steps:
        if step.id is None:
            row = BisectionStep(position=step.position, reading=step.reading,
                                commit_id=_commit_id(session, bisection.repository_id, step.commit),
                                run_id=step.run_id, job_id=step.job_id, created_at=utcnow(),
                                **{name: getattr(step, name) for name in _STEP_FIELDS})
            bisection.steps.append(row)
            session.flush()
            step.id = row.id
            continue
        row = stored[step.id]
        for name in _STEP_FIELDS:
            if getattr(row, name) != getattr(step, name):
                setattr(row, name, getattr(step, name))
    session.flush()


def _commit_id(session: Session, repository_id: int, sha: str) -> int | None:
    return session.scalar(sa.select(Commit.id).where(Commit.repository_id == repository_id, Commit.sha == sha))


# --- what the driver reads beside the record -----------------------------------------------------


def running_count(session: Session) -> int:
    """Bisections running now (the queued ones wait while `bisect.max_active` do)."""
    return session.scalar(sa.select(sa.func.count()).select_from(Bisection).where(Bisection.state == "running")) or 0


def active_ids(session: Session) -> list[int]:
    """The queued and running bisections, oldest first."""
    return list(session.scalars(sa.select(Bisection.id).where(Bisection.state.in_(ACTIVE_BISECTION_STATES))
                                .order_by(Bisection.created_at, Bisection.id)).all())


def first_parents(session: Session, repository: str) -> dict[str, str | None]:
    """sha -> its first parent's sha (None: no parent recorded), for every recorded commit of the repository."""
    return {sha: parent for sha, parent in session.execute(
        sa.select(Commit.sha, CommitParent.parent_sha)
        .outerjoin(CommitParent, sa.and_(CommitParent.commit_id == Commit.id, CommitParent.position == 0))
        .join(Repository, Commit.repository_id == Repository.id).where(Repository.name == repository))}


def case_outcome(session: Session, job_id: str, case: CaseId) -> tuple[str, str | None] | None:
    """(status, reason) of the case's result in the job; None when the job stored none."""
    found = session.execute(
        sa.select(CaseResultRow.status, CaseResultRow.reason).join(Case, CaseResultRow.case_id == Case.id)
        .where(CaseResultRow.job_id == job_id, Case.case_id == case)).first()
    return (found[0], found[1]) if found is not None else None
