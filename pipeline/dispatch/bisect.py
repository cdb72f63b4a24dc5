"""Bisection: from a confirmed change point over a commit range to the commit that made it, by paired
runs of the range's commits against its base (`bisect_search.plan` picks them); `Bisector`, a service
thread, starts and advances them.

Outcomes, lifecycle and bounds: docs/design.md, "Bisection". Like `dispatch`, the functions take a
Session and commit nothing; the thread owns transactions.
"""

from __future__ import annotations

import glob
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeline.analysis import bisect_search
from pipeline.analysis.bisect_search import BASE, Level
from pipeline.config import Settings
from pipeline.contracts.ids import CaseId
from pipeline.dispatch.triggers import TriggerError, queue_run
from pipeline.loops import Loop
from pipeline.store import ingest
from pipeline.store.compare import CompareError, compare
from pipeline.store.db import session_scope
from pipeline.store.models import (
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
from pipeline.store.states import ACTIVE_BISECTION_STATES

__all__ = [
    "WHO",
    "BisectConflict",
    "BisectError",
    "BisectNotFound",
    "Bisector",
    "advance",
    "cancel_retracted",
    "change_point_of_series",
    "request_bisection",
    "start_automatic",
]

log = logging.getLogger(__name__)

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


def request_bisection(session: Session, settings: Settings, *, change_point_id: int, who: str) -> Bisection:
    """A queued bisection of the change point (docs/design.md, "Bisection"). Raises BisectNotFound for an unknown
    change point, BisectConflict when one is active already, BisectError when there is nothing to
    bisect (retracted, or a range of one commit: that commit is the culprit)."""
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
        state="queued", result={}, summary="", reason="", max_steps=settings.bisect.max_steps,
        max_device_s=settings.bisect.max_device_s, device_s=0.0, requested_by=who, created_at=utcnow())
    try:
        with session.begin_nested():   # the partial unique index refuses a second active one
            session.add(bisection)
            session.flush()
    except IntegrityError:
        active = _active(session, change_point_id)
        raise BisectConflict(f"change_point_id: change point {change_point_id} is being bisected already",
                             active.id if active else 0) from None
    return bisection


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


def start_automatic(session: Session, settings: Settings, *, now: datetime | None = None) -> list[int]:
    """Queue a bisection of each regression confirmed in the last `bisect.auto_within_h` hours
    over a range of more than one first-parent commit, unless one was made for it since it was
    (last) confirmed or one is active. Returns the new bisections' ids."""
    now = now or utcnow()
    since = now - timedelta(hours=settings.bisect.auto_within_h)
    made_since = sa.exists().where(Bisection.change_point_id == ChangePoint.id, sa.or_(
        Bisection.state.in_(ACTIVE_BISECTION_STATES), Bisection.created_at >= ChangePoint.confirmed_at))
    before = sa.orm.aliased(Commit)
    one_commit = sa.exists().where(CommitParent.commit_id == ChangePoint.after_commit_id, CommitParent.position == 0,
                                   CommitParent.parent_sha == before.sha)
    candidates = session.scalars(
        sa.select(ChangePoint.id).join(before, ChangePoint.before_commit_id == before.id)
        .where(ChangePoint.lifecycle == "confirmed", ChangePoint.direction == "regression",
               ChangePoint.confirmed_at >= since, ~made_since, ~one_commit)
        .order_by(ChangePoint.confirmed_at, ChangePoint.id)).all()
    made = []
    for cp_id in candidates:
        try:
            made.append(request_bisection(session, settings, change_point_id=cp_id, who=WHO).id)
        except BisectError as exc:  # another service process was first
            log.info("change point %d: not bisected (%s)", cp_id, exc)
    return made


# --- cancelling --------------------------------------------------------------------------------


def cancel(session: Session, bisection: Bisection, reason: str) -> None:
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
    _note(session, bisection, f"bisection {bisection.id} cancelled: {reason}")


def cancel_retracted(session: Session) -> list[int]:
    """Cancel the active bisections whose change point the analysis retracted; their ids."""
    found = session.execute(
        sa.select(Bisection, ChangePoint.reason).join(ChangePoint, Bisection.change_point_id == ChangePoint.id)
        .where(Bisection.state.in_(ACTIVE_BISECTION_STATES), ChangePoint.lifecycle == "retracted")).all()
    for bisection, why in found:
        cancel(session, bisection, f"its change point was retracted: {why}")
    return [b.id for b, _ in found]


def _note(session: Session, bisection: Bisection, text: str) -> None:
    """A triage event on the change point saying what the bisection did; its triage state kept."""
    cp = session.get(ChangePoint, bisection.change_point_id)
    if cp is not None:
        session.add(TriageEvent(change_point_id=cp.id, state=cp.state, who=WHO, at=utcnow(), note=text[:4000]))


# --- advancing ---------------------------------------------------------------------------------


def _resolve_range(session: Session, bisection: Bisection, settings: Settings) -> list[str]:
    """The first-parent commits after the base up to the bad commit, oldest first (base excluded).
    Commits the store has not recorded are read from the suite checkout (`dispatch.suite_path`)."""
    base, bad = _sha(session, bisection.base_commit_id), _sha(session, bisection.bad_commit_id)
    limit = settings.bisect.max_range
    for attempt in range(2):
        rows = session.execute(
            sa.select(Commit.sha, CommitParent.parent_sha)
            .outerjoin(CommitParent, sa.and_(CommitParent.commit_id == Commit.id, CommitParent.position == 0))
            .where(Commit.repository_id == bisection.repository_id)).all()
        parent = {sha: p for sha, p in rows}
        chain, sha = [], bad
        while sha != base and sha in parent and len(chain) <= limit:
            chain.append(sha)
            sha = parent[sha]
        if sha == base:
            return chain[::-1]
        if len(chain) > limit:
            raise BisectError(f"the range {base[:10]}..{bad[:10]} is longer than bisect.max_range ({limit} commits)")
        if attempt == 0 and settings.dispatch.suite_path:   # read what the store lacks from the checkout, once
            _record_from_checkout(session, bisection, settings.dispatch.suite_path, bad, limit + 1)
            continue
        if sha is None:
            raise BisectError(f"{base[:10]} is not a first-parent ancestor of {bad[:10]}")
        raise BisectError(f"commit {sha[:10]} (in the range {base[:10]}..{bad[:10]}) is not recorded, and the "
                          "service has no suite checkout (dispatch.suite_path) to read the range from")
    raise AssertionError("unreachable")


def _record_from_checkout(session: Session, bisection: Bisection, suite_path: str, bad: str, limit: int) -> None:
    """Record `bad` and its first-parent ancestors (at most `limit`) from the suite checkout."""
    from pipeline.build.suite_loader import SuiteError, commit_history, locate_suite

    repository = session.get(Repository, bisection.repository_id)
    assert repository is not None
    try:
        history = commit_history(locate_suite(Path(suite_path)), bad, limit=limit)
    except (SuiteError, RuntimeError) as exc:
        raise BisectError(f"the suite checkout cannot list the range: {exc}") from None
    ingest.record_commits(session, repository=repository, commits=history)


@dataclass(frozen=True)
class _Reading:
    """What a finished step's job says about its commit."""

    level: Level | None
    pvalue: float | None = None
    paired: bool = False
    threshold: float | None = None
    verdict: str | None = None
    """unbuildable | unrunnable, when there is no level"""
    reason: str = ""


def _read_job(session: Session, settings: Settings, bisection: Bisection, step: BisectionStep, job: Job,
              base_sha: str) -> _Reading:
    """The paired change of the bisection's case in the step's finished job, or why there is none."""
    if job.status == "failed":
        error = job.error or "the job failed"
        return _Reading(None, verdict="unbuildable" if error.startswith("build failed") else "unrunnable",
                        reason=error)
    case = CaseId.parse(bisection.cases[0], lenient=True)  # stored: the text of a case of the store
    found = session.execute(
        sa.select(CaseResultRow.status, CaseResultRow.reason).join(Case, CaseResultRow.case_id == Case.id)
        .where(CaseResultRow.job_id == job.id, Case.case_id == case)).first()
    if found is None:
        return _Reading(None, verdict="unrunnable", reason=f"the job stored no result of {case}")
    status, reason = found
    if status != "ok":
        unbuilt = status == "skipped" and (reason or "").startswith("not built")
        return _Reading(None, verdict="unbuildable" if unbuilt else "unrunnable",
                        reason=f"{status}: {reason or 'no reason given'}")
    repository = session.scalar(sa.select(Repository.name).where(Repository.id == bisection.repository_id))
    device_class = session.scalar(sa.select(DeviceClassRow.name).where(DeviceClassRow.id == bisection.device_class_id))
    head = _sha(session, step.commit_id)
    try:
        comparison = compare(session, repository=str(repository), head_sha=head, device_class=str(device_class),
                             settings=settings.compare, base_sha=base_sha)
    except CompareError as exc:
        return _Reading(None, verdict="unrunnable", reason=str(exc))
    rows = sorted((r for r in comparison.rows if r.case_id == case and r.change is not None),
                  key=lambda r: not r.paired)
    if not rows:
        return _Reading(None, verdict="unrunnable", reason=f"no change of {case} against the base could be computed")
    row = rows[0]
    assert row.change is not None
    level = Level(row.change, row.ci_low if row.ci_low is not None else row.change,
                  row.ci_high if row.ci_high is not None else row.change)
    return _Reading(level, pvalue=row.pvalue, paired=row.paired, threshold=row.threshold)


def _job_seconds(job: Job) -> float:
    if job.started_at is None or job.finished_at is None:
        return 0.0
    return max(0.0, (job.finished_at - job.started_at).total_seconds())


def _queue_step(session: Session, settings: Settings, bisection: Bisection, position: int) -> None:
    sha = bisection.commits[position - 1]
    commit_id = session.scalar(sa.select(Commit.id).where(Commit.repository_id == bisection.repository_id,
                                                          Commit.sha == sha))
    repository = session.scalar(sa.select(Repository.name).where(Repository.id == bisection.repository_id))
    device_class = session.scalar(sa.select(DeviceClassRow.name).where(DeviceClassRow.id == bisection.device_class_id))
    result = queue_run(session, repository=str(repository), commit_sha=sha, device_classes=[str(device_class)],
                       cases=glob.escape(bisection.cases[0]), max_attempts=settings.dispatch.max_attempts,
                       extra_targets=settings.dispatch.build_targets, can_build=bool(settings.dispatch.suite_path),
                       kind="adhoc", base_sha=_sha(session, bisection.base_commit_id))
    reading = 1 + sum(1 for s in bisection.steps if s.position == position)
    step = BisectionStep(position=position, reading=reading, commit_id=commit_id, run_id=result.run_id,
                         job_id=result.job_ids[str(device_class)], state="queued", paired=False, reason="",
                         created_at=utcnow())
    bisection.steps.append(step)
    session.flush()


def advance(session: Session, settings: Settings, bisection_id: int) -> bool:
    """One pass over a bisection: start it when it is queued and there is room, read the steps
    whose jobs ended, queue the next probes or finish. Returns whether anything changed."""
    # locked (PostgreSQL) so that two service processes never queue the same step twice
    bisection = session.get(Bisection, bisection_id, with_for_update=session.get_bind().dialect.name == "postgresql")
    if bisection is None or bisection.state not in ACTIVE_BISECTION_STATES:
        return False
    if bisection.state == "queued":
        running = session.scalar(sa.select(sa.func.count()).select_from(Bisection).where(Bisection.state == "running"))
        if (running or 0) >= settings.bisect.max_active:
            return False
        try:
            bisection.commits = _resolve_range(session, bisection, settings)
        except BisectError as exc:
            _fail(session, bisection, str(exc))
            return True
        bisection.state, bisection.started_at = "running", utcnow()
        session.flush()
    changed = _read_finished_steps(session, settings, bisection)
    return _plan_next(session, settings, bisection) or changed


def _read_finished_steps(session: Session, settings: Settings, bisection: Bisection) -> bool:
    base_sha = _sha(session, bisection.base_commit_id)
    changed = False
    for step in bisection.steps:
        if step.state != "queued" or step.job_id is None:
            continue
        job = session.get(Job, step.job_id)
        if job is None or job.status not in ("done", "failed"):
            continue
        reading = _read_job(session, settings, bisection, step, job, base_sha)
        step.device_s = _job_seconds(job)
        bisection.device_s = (bisection.device_s or 0.0) + step.device_s
        step.finished_at = utcnow()
        if reading.level is None:
            step.state, step.verdict, step.reason = "skipped", reading.verdict, reading.reason[:4000]
        else:
            step.state = "done"
            step.change, step.ci_low, step.ci_high = reading.level.change, reading.level.low, reading.level.high
            step.pvalue, step.paired = reading.pvalue, reading.paired
            if step.position == len(bisection.commits) and reading.threshold is not None:
                bisection.result = {**bisection.result, "threshold": reading.threshold}
        changed = True
    session.flush()
    return changed


def _levels(bisection: Bisection) -> dict[int, Level]:
    """Each measured position's level: its readings combined (a position is run twice to confirm a
    change found at several places, `bisect_search.plan`)."""
    readings: dict[int, list[Level]] = {}
    for s in bisection.steps:
        if s.state == "done" and s.change is not None:
            readings.setdefault(s.position, []).append(Level(
                s.change, s.ci_low if s.ci_low is not None else s.change,
                s.ci_high if s.ci_high is not None else s.change))
    return {position: bisect_search.combine(r) for position, r in readings.items()}


def _skipped(bisection: Bisection, levels: dict[int, Level]) -> dict[int, BisectionStep]:
    """Positions with no level because their jobs could not build or run the commit (a failed
    repeat of a measured position leaves its level standing)."""
    return {s.position: s for s in bisection.steps if s.state == "skipped" and s.position not in levels}


def _min_jump(bisection: Bisection, settings: Settings, bad: Level | None) -> float:
    """The smallest move searched for: the case's paired threshold (the floor, or 3 x its measured
    noise), and `bisect.min_share` of the whole change once the bad commit's is known."""
    floor = float(bisection.result.get("threshold") or settings.compare.paired_min_change)
    return max(floor, settings.bisect.min_share * abs(bad.change)) if bad is not None else floor


def _plan_next(session: Session, settings: Settings, bisection: Bisection) -> bool:
    n = len(bisection.commits)
    levels = _levels(bisection)
    bad = levels.get(n)
    jump = _min_jump(bisection, settings, bad)
    for step in bisection.steps:   # verdicts in the light of what is known now
        if step.state == "done" and step.change is not None:
            level = levels[step.position]
            step.verdict = bisect_search.verdict(level, bad, jump) if step.position != n else (
                "new level" if bisect_search.differs(BASE, level, jump) else "not reproduced")
    skipped = _skipped(bisection, levels)
    if n in skipped:
        _fail(session, bisection, f"the bad commit {bisection.commits[-1][:10]} could not be run again "
                                  f"({skipped[n].verdict}: {skipped[n].reason})")
        return True
    pending = {s.position for s in bisection.steps if s.state == "queued"}
    finished = Counter(s.position for s in bisection.steps if s.state != "queued")
    plan = bisect_search.plan(n, levels, skipped=set(skipped), pending=pending, min_jump=jump,
                              repeated={p for p, count in finished.items() if count >= 2})
    if plan.probes:
        room = bisection.max_steps - len(bisection.steps)
        if bisection.device_s >= bisection.max_device_s:
            room = 0
        for position in plan.probes[:max(0, room)]:
            try:
                _queue_step(session, settings, bisection, position)
            except TriggerError as exc:
                _fail(session, bisection, f"commit {bisection.commits[position - 1][:10]} cannot be queued: {exc}")
                return True
        if room > 0:
            return True
        if pending:
            return False   # the limit is reached: what is running still counts, then it stops
        _finish(session, bisection, plan, limit=True, jump=jump)
        return True
    if plan.done:
        _finish(session, bisection, plan, limit=False, jump=jump)
        return True
    return False


def _fail(session: Session, bisection: Bisection, reason: str) -> None:
    bisection.state, bisection.reason, bisection.finished_at = "failed", reason[:4000], utcnow()
    bisection.summary = f"bisection failed: {reason}"[:4000]
    _note(session, bisection, bisection.summary)
    session.flush()


def _finish(session: Session, bisection: Bisection, plan: bisect_search.Plan, *, limit: bool, jump: float) -> None:
    """Record the outcome (`models.BISECTION_OUTCOMES`), its sentence and the note on the change point."""
    shas = [_sha(session, bisection.base_commit_id), *bisection.commits]
    n = len(bisection.commits)
    levels = _levels(bisection)
    total = levels[n].change if n in levels else 0.0
    skipped = [{"sha": shas[s.position], "position": s.position, "verdict": s.verdict, "reason": s.reason}
               for s in _skipped(bisection, levels).values()]
    culprits = [{"sha": shas[f.position], "position": f.position, "jump": f.jump,
                 "share": f.jump / total if total else None} for f in plan.culprits]
    unresolved = [{"after": shas[u.low], "upto": shas[u.high], "candidates": [shas[p] for p in (*u.skipped, u.high)],
                   "jump": u.jump} for u in plan.unresolved]
    open_ranges = []
    if limit:
        known = sorted({0, *levels})
        open_ranges = [{"after": shas[a], "upto": shas[b]} for a, b in pairwise(known)
                       if b - a > 1 and bisect_search.differs(levels.get(a, BASE), levels[b], jump)]
    if limit:
        outcome = "limit reached"
    elif not culprits and not unresolved:
        outcome = "not reproduced"
    elif len(culprits) + len(unresolved) > 1:
        outcome = "several commits"
    elif culprits:
        outcome = "culprit"
    else:
        outcome = "ambiguous"
    bisection.outcome = outcome
    bisection.result = {**bisection.result, "total_change": total, "min_jump": jump, "culprits": culprits,
                        "unresolved": unresolved, "skipped": skipped, "open": open_ranges}
    if outcome == "culprit":
        bisection.culprit_commit_id = session.scalar(sa.select(Commit.id).where(
            Commit.repository_id == bisection.repository_id, Commit.sha == culprits[0]["sha"]))
    bisection.summary = _summary(bisection, outcome, total)
    bisection.state, bisection.finished_at = "done", utcnow()
    _note(session, bisection, f"bisection {bisection.id}: {bisection.summary}")
    session.flush()


def _summary(bisection: Bisection, outcome: str, total: float) -> str:
    r = bisection.result
    jobs = f"{len(bisection.steps)} job{'s' if len(bisection.steps) != 1 else ''}"
    skipped = "; skipped: " + ", ".join(f"{s['sha'][:10]} ({s['verdict']})" for s in r["skipped"]) \
        if r["skipped"] else ""
    if outcome == "culprit":
        c = r["culprits"][0]
        text = f"commit {c['sha'][:10]} made the change ({c['jump']:+.1%} of {total:+.1%})"
    elif outcome == "several commits":
        parts = [f"{c['sha'][:10]} ({c['jump']:+.1%})" for c in r["culprits"]]
        parts += ["one of " + ", ".join(s[:10] for s in u["candidates"]) + f" ({u['jump']:+.1%})"
                  for u in r["unresolved"]]
        text = f"not attributable to one commit: the change of {total:+.1%} is spread over " + ", ".join(parts)
    elif outcome == "ambiguous":
        u = r["unresolved"][0]
        text = ("the culprit is one of " + ", ".join(s[:10] for s in u["candidates"])
                + ": the commits before the last could not be built or run")
    elif outcome == "not reproduced":
        text = f"paired runs of the bad commit against the base show {total:+.1%}: the change was not reproduced"
    else:
        ranges = ", ".join(f"{o['after'][:10]}..{o['upto'][:10]}" for o in r["open"]) or "the range"
        text = f"stopped at its limit ({bisection.max_steps} jobs, {bisection.max_device_s:.0f} s of device time) " \
               f"with the change still in {ranges}"
    return f"{text} [{jobs}{skipped}]"


# --- the service thread ------------------------------------------------------------------------


class Bisector(Loop):
    """Cancels bisections of retracted change points, starts automatic ones, advances the others."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        super().__init__("bisector", settings.bisect.period_s)
        self.settings, self.engine = settings, engine

    def step(self) -> bool:
        with session_scope(self.engine) as session:
            for bisection_id in cancel_retracted(session):
                log.info("bisection %d cancelled: its change point was retracted", bisection_id)
            if self.settings.bisect.auto and self.settings.dispatch.suite_path:
                for bisection_id in start_automatic(session, self.settings):
                    log.info("bisection %d queued for a newly confirmed regression", bisection_id)
            active: Sequence[int] = session.scalars(
                sa.select(Bisection.id).where(Bisection.state.in_(ACTIVE_BISECTION_STATES))
                .order_by(Bisection.created_at, Bisection.id)).all()
        for bisection_id in active:
            try:
                with session_scope(self.engine) as session:
                    advance(session, self.settings, bisection_id)
            except Exception as exc:   # one bisection's fault must not stop the others
                log.exception("bisection %d: step failed", bisection_id)
                with session_scope(self.engine) as session:
                    bisection = session.get(Bisection, bisection_id)
                    if bisection is not None and bisection.state in ACTIVE_BISECTION_STATES:
                        _fail(session, bisection, f"{type(exc).__name__}: {exc}")
        return False
