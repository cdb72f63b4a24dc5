"""Bisection: from a confirmed change point over a commit range to the commit that made it, by paired
runs of the range's commits against its base (`bisect_search.plan` picks them); `Bisector`, a service
thread, starts and advances them.

Outcomes, lifecycle and bounds: docs/design.md, "Bisection". Like the job queue, the functions take a
Session and commit nothing; the thread owns transactions. The store keeps the bisection
(`store.bisections`): this module reads it as a record, decides, and saves the record back.
"""

from __future__ import annotations

import glob
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

from pipeline.results.analysis import bisect_search
from pipeline.results.analysis.bisect_search import BASE, Level
from pipeline.config import Settings
from pipeline.contracts.ids import CaseId
from pipeline.orchestration.dispatch.triggers import TriggerError, queue_run
from pipeline.loops import Loop
from pipeline.results.store import bisections, ingest
from pipeline.results.store.bisect_views import BisectionView, get_bisection
from pipeline.results.store.bisections import (
    WHO,
    BisectConflict,
    BisectError,
    BisectionRecord,
    BisectNotFound,
    StepRecord,
    cancel_retracted,
    change_point_of_series,
)
from pipeline.results.store.compare import CompareError, compare
from pipeline.results.store.db import Engine, Session, session_scope
from pipeline.results.store.queue import JobRow, get_job
from pipeline.results.store.states import ACTIVE_BISECTION_STATES

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


# --- requests ----------------------------------------------------------------------------------


def request_bisection(session: Session, settings: Settings, *, change_point_id: int, who: str) -> BisectionView:
    """A queued bisection of the change point (docs/design.md, "Bisection"), bounded by `bisect.max_steps` and
    `bisect.max_device_s`. Raises BisectNotFound for an unknown change point, BisectConflict when one
    is active already, BisectError when there is nothing to bisect (retracted, or a range of one
    commit: that commit is the culprit)."""
    made = bisections.request(session, change_point_id=change_point_id, who=who,
                              max_steps=settings.bisect.max_steps, max_device_s=settings.bisect.max_device_s)
    found = get_bisection(session, made)
    assert found is not None
    return found


def start_automatic(session: Session, settings: Settings, *, now: datetime | None = None) -> list[int]:
    """Queue a bisection of each regression confirmed in the last `bisect.auto_within_h` hours
    over a range of more than one first-parent commit, unless one was made for it since it was
    (last) confirmed or one is active. Returns the new bisections' ids."""
    made = []
    for cp_id in bisections.automatic_candidates(session, now=now or datetime.now(UTC),
                                                 within_h=settings.bisect.auto_within_h):
        try:
            made.append(bisections.request(session, change_point_id=cp_id, who=WHO,
                                           max_steps=settings.bisect.max_steps,
                                           max_device_s=settings.bisect.max_device_s))
        except BisectError as exc:  # another service process was first
            log.info("change point %d: not bisected (%s)", cp_id, exc)
    return made


# --- advancing ---------------------------------------------------------------------------------


def _resolve_range(session: Session, bisection: BisectionRecord, settings: Settings) -> list[str]:
    """The first-parent commits after the base up to the bad commit, oldest first (base excluded).
    Commits the store has not recorded are read from the suite checkout (`dispatch.suite_path`)."""
    base, bad = bisection.base, bisection.bad
    limit = settings.bisect.max_range
    for attempt in range(2):
        parent = bisections.first_parents(session, bisection.repository)
        chain: list[str] = []
        sha: str | None = bad
        while sha is not None and sha != base and sha in parent and len(chain) <= limit:
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


def _record_from_checkout(session: Session, bisection: BisectionRecord, suite_path: str, bad: str,
                          limit: int) -> None:
    """Record `bad` and its first-parent ancestors (at most `limit`) from the suite checkout."""
    from pipeline.build.suite_loader import SuiteError, commit_history, locate_suite

    try:
        history = commit_history(locate_suite(Path(suite_path)), bad, limit=limit)
    except (SuiteError, RuntimeError) as exc:
        raise BisectError(f"the suite checkout cannot list the range: {exc}") from None
    ingest.record_commits(session, repository=bisection.repository, commits=history)


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


def _read_job(session: Session, settings: Settings, bisection: BisectionRecord, step: StepRecord, job: JobRow,
              base_sha: str) -> _Reading:
    """The paired change of the bisection's case in the step's finished job, or why there is none."""
    if job.status == "failed":
        error = job.error or "the job failed"
        return _Reading(None, verdict="unbuildable" if error.startswith("build failed") else "unrunnable",
                        reason=error)
    case = CaseId.parse(bisection.cases[0], lenient=True)  # stored: the text of a case of the store
    found = bisections.case_outcome(session, job.id, case)
    if found is None:
        return _Reading(None, verdict="unrunnable", reason=f"the job stored no result of {case}")
    status, reason = found
    if status != "ok":
        unbuilt = status == "skipped" and (reason or "").startswith("not built")
        return _Reading(None, verdict="unbuildable" if unbuilt else "unrunnable",
                        reason=f"{status}: {reason or 'no reason given'}")
    try:
        comparison = compare(session, repository=bisection.repository, head_sha=step.commit,
                             device_class=bisection.device_class, settings=settings.compare, base_sha=base_sha)
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


def _job_seconds(job: JobRow) -> float:
    if job.started_at is None or job.finished_at is None:
        return 0.0
    return max(0.0, (job.finished_at - job.started_at).total_seconds())


def _queue_step(session: Session, settings: Settings, bisection: BisectionRecord, position: int) -> None:
    sha = bisection.commits[position - 1]
    result = queue_run(session, repository=bisection.repository, commit_sha=sha,
                       device_classes=[bisection.device_class], cases=glob.escape(bisection.cases[0]),
                       max_attempts=settings.dispatch.max_attempts, extra_targets=settings.dispatch.build_targets,
                       can_build=bool(settings.dispatch.suite_path), kind="adhoc", base_sha=bisection.base)
    reading = 1 + sum(1 for s in bisection.steps if s.position == position)
    bisection.steps.append(StepRecord(position=position, reading=reading, commit=sha, run_id=result.run_id,
                                      job_id=result.job_ids[bisection.device_class]))


def advance(session: Session, settings: Settings, bisection_id: int) -> bool:
    """One pass over a bisection: start it when it is queued and there is room, read the steps
    whose jobs ended, queue the next probes or finish. Returns whether anything changed."""
    # locked (PostgreSQL) so that two service processes never queue the same step twice
    bisection = bisections.load(session, bisection_id, lock=True)
    if bisection is None or bisection.state not in ACTIVE_BISECTION_STATES:
        return False
    if bisection.state == "queued":
        if bisections.running_count(session) >= settings.bisect.max_active:
            return False
        try:
            bisection.commits = _resolve_range(session, bisection, settings)
        except BisectError as exc:
            _fail(session, bisection, str(exc))
            return True
        bisection.state, bisection.started_at = "running", datetime.now(UTC)
        bisections.save(session, bisection)
    changed = _read_finished_steps(session, settings, bisection)
    planned = _plan_next(session, settings, bisection)
    bisections.save(session, bisection)
    return planned or changed


def _read_finished_steps(session: Session, settings: Settings, bisection: BisectionRecord) -> bool:
    base_sha = bisection.base
    changed = False
    for step in bisection.steps:
        if step.state != "queued" or step.job_id is None:
            continue
        job = get_job(session, step.job_id)
        if job is None or job.status not in ("done", "failed"):
            continue
        reading = _read_job(session, settings, bisection, step, job, base_sha)
        step.device_s = _job_seconds(job)
        bisection.device_s = (bisection.device_s or 0.0) + step.device_s
        step.finished_at = datetime.now(UTC)
        if reading.level is None:
            step.state, step.verdict, step.reason = "skipped", reading.verdict, reading.reason[:4000]
        else:
            step.state = "done"
            step.change, step.ci_low, step.ci_high = reading.level.change, reading.level.low, reading.level.high
            step.pvalue, step.paired = reading.pvalue, reading.paired
            if step.position == len(bisection.commits) and reading.threshold is not None:
                bisection.result = {**bisection.result, "threshold": reading.threshold}
        changed = True
    return changed


def _levels(bisection: BisectionRecord) -> dict[int, Level]:
    """Each measured position's level: its readings combined (a position is run twice to confirm a
    change found at several places, `bisect_search.plan`)."""
    readings: dict[int, list[Level]] = {}
    for s in bisection.steps:
        if s.state == "done" and s.change is not None:
            readings.setdefault(s.position, []).append(Level(
                s.change, s.ci_low if s.ci_low is not None else s.change,
                s.ci_high if s.ci_high is not None else s.change))
    return {position: bisect_search.combine(r) for position, r in readings.items()}


def _skipped(bisection: BisectionRecord, levels: dict[int, Level]) -> dict[int, StepRecord]:
    """Positions with no level because their jobs could not build or run the commit (a failed
    repeat of a measured position leaves its level standing)."""
    return {s.position: s for s in bisection.steps if s.state == "skipped" and s.position not in levels}


def _min_jump(bisection: BisectionRecord, settings: Settings, bad: Level | None) -> float:
    """The smallest move searched for (a log ratio): the case's paired threshold (the floor, or 3 x its
    measured noise), and `bisect.min_share` of the whole move once the bad commit's is known."""
    floor = float(bisection.result.get("threshold") or settings.compare.paired_min_change)
    return bisect_search.smallest_jump(floor, settings.bisect.min_share, bad)


def _plan_next(session: Session, settings: Settings, bisection: BisectionRecord) -> bool:
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


def _fail(session: Session, bisection: BisectionRecord, reason: str) -> None:
    bisection.state, bisection.reason, bisection.finished_at = "failed", reason[:4000], datetime.now(UTC)
    bisection.summary = f"bisection failed: {reason}"[:4000]
    bisections.note(session, bisection.change_point_id, bisection.summary)
    bisections.save(session, bisection)


def _finish(session: Session, bisection: BisectionRecord, plan: bisect_search.Plan, *, limit: bool,
            jump: float) -> None:
    """Record the outcome (`states.BISECTION_OUTCOMES`), its sentence and the note on the change point."""
    shas = [bisection.base, *bisection.commits]
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
        bisection.culprit = str(culprits[0]["sha"])
    bisection.summary = _summary(bisection, outcome, total)
    bisection.state, bisection.finished_at = "done", datetime.now(UTC)
    bisections.note(session, bisection.change_point_id, f"bisection {bisection.id}: {bisection.summary}")
    bisections.save(session, bisection)


def _summary(bisection: BisectionRecord, outcome: str, total: float) -> str:
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
            active = bisections.active_ids(session)
        for bisection_id in active:
            try:
                with session_scope(self.engine) as session:
                    advance(session, self.settings, bisection_id)
            except Exception as exc:   # one bisection's fault must not stop the others
                log.exception("bisection %d: step failed", bisection_id)
                with session_scope(self.engine) as session:
                    bisection = bisections.load(session, bisection_id)
                    if bisection is not None and bisection.state in ACTIVE_BISECTION_STATES:
                        _fail(session, bisection, f"{type(exc).__name__}: {exc}")
        return False
