"""History analysis: change points in each series' default-branch history, stored for triage.
docs/design.md, "History analysis in the store", has the rules and why; in short:

A series' history is one value per commit of the default-branch chain (`history.default_branch_chain`)
that has a measurement in it, oldest first: the median of the commit's runs' levels
(`history.commit_level`; a rerun adds a level). After each upload `changepoints.analyse` of each
touched series' newest stretch brings its stored change points in line: new ones inserted
(suspected, or confirmed under the confirmation rule: only confirmed regressions are alerted),
reported ones updated, the others retracted with a reason, never deleted (their triage kept), a
confirmed one kept while it `holds`. Each lifecycle change is a triage event by `ANALYSIS_WHO`.

Incremental: the stretch is the newest `TAIL_WINDOWS` analysis windows, starting on the split's
half-window grid, taken from the series' tail this process kept (`TAILS`, valid while the store
holds the analysis state it was kept with; otherwise the whole history is read); change points are
judged from `SETTLED_WINDOWS` windows into it, older ones are settled. `reanalyze_all` and
`analyze_series` read whole histories. Noise: `Series.noise_unpaired` from the newest
`NOISE_HISTORY` commits at each analysis, `Series.noise_paired` from A/A calibrations
(`learn_paired_noise`).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from datetime import datetime

import numpy as np
import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.results.analysis import changepoints, stats, workers
from pipeline.config import AnalysisSettings
from pipeline.contracts import METRICS, ResultDocument
from pipeline.results.store.compare import paired_changes
from pipeline.results.store.db import dialect_insert
from pipeline.results.store.history import (
    FALLBACK_RUN_KINDS,
    ChainCommit,
    commit_level,
    default_branch_chain,
)
from pipeline.results.store.models import (
    CaseResultRow,
    ChangePoint,
    Commit,
    Job,
    Measurement,
    Repository,
    Run,
    Series,
    TriageEvent,
    utcnow,
)

__all__ = [
    "ANALYSIS_WHO",
    "AnalysisSummary",
    "analyze_after_ingest",
    "analyze_series",
    "learn_paired_noise",
    "reanalyze_all",
    "series_direction",
]

log = logging.getLogger(__name__)

ANALYSIS_WHO = "benchfarm analysis"
"""Who the first triage event ("needs triage") of a detected change point names."""
ANALYZED_RUN_KINDS = FALLBACK_RUN_KINDS
"""Runs whose upload triggers analysis, besides any run of a commit recorded on the default branch."""
TAIL_WINDOWS = 4
"""Analysis windows of a history the analysis after an upload reads (module doc, incremental)."""
BATCH_SERIES = 500
"""Series whose whole histories the batch analysis reads at a time."""
TAIL_CACHE_SERIES = 50_000
"""Series whose tail a process keeps (about 4 KB each at the default window)."""
SETTLED_WINDOWS = 2
"""Windows into that stretch from which change points are judged; older ones are settled."""
NOISE_HISTORY = 30
"""Newest default-branch commits (unpaired) or A/A calibrations (paired) a series' noise is learned from."""


@dataclass(frozen=True)
class AnalysisSummary:
    series: int
    """series analysed"""
    new_change_points: int
    """change points stored for the first time (suspected or confirmed)"""
    confirmed: int = 0
    """stored change points that became confirmed (new ones included)"""
    retracted: int = 0
    """stored change points retracted"""


@dataclass
class _History:
    """The stretch of a series' history one analysis reads (module doc, incremental)."""

    commit_ids: np.ndarray
    """int64, oldest first"""
    values: np.ndarray
    """float64: each commit's level (`history.commit_level`)"""
    digests: list[str | None]
    """the binaries the newest (up to `NOISE_HISTORY`) commits timed (the newest run's), oldest first"""
    length: int
    """commits in the whole history; the stretch is its last `len(values)`"""
    judged_from: int = 0
    """position in the whole history from which change points are reported and stored points
    reconciled; those before it are settled"""

    @property
    def offset(self) -> int:
        return self.length - self.values.size

    def stretch(self, window: int) -> _History:
        """The newest commits the analysis after an upload reads (module doc, incremental)."""
        start = stretch_start(self.length, window)
        if start <= self.offset:
            return self
        cut = start - self.offset
        return _History(self.commit_ids[cut:], self.values[cut:], self.digests, self.length,
                        judged_from=start + SETTLED_WINDOWS * window if start else 0)


def stretch_start(length: int, window: int) -> int:
    """Position in a history of `length` commits of the first commit the analysis after an upload
    reads: `TAIL_WINDOWS` windows back, rounded down to the split's half-window grid (so the same
    windows recur from upload to upload and `changepoints` remembers their splits); 0 while the
    whole history is that short."""
    span = TAIL_WINDOWS * window
    if length <= span:
        return 0
    step = max(1, window // 2)
    return (length - span) // step * step


@dataclass
class _Tally:
    added: int = 0
    confirmed: int = 0
    retracted: int = 0


class _Directed(Protocol):
    lower_is_better: bool | None
    metric: str


def series_direction(series: _Directed) -> bool:
    """lower_is_better for the series: its own setting, else its metric's."""
    if series.lower_is_better is not None:
        return series.lower_is_better
    return METRICS[series.metric].lower_is_better


def _histories(session: Session, chain: Sequence[ChainCommit], series_ids: Iterable[int] | None) -> dict[int, _History]:
    """series id -> its whole history on `chain` (module doc), oldest first. One query."""
    position = {c.id: i for i, c in enumerate(chain)}
    if not position:
        return {}
    query = (sa.select(Measurement.series_id, Measurement.commit_id, Job.run_id, Measurement.median,
                       CaseResultRow.binary_digest)
             .join(CaseResultRow, Measurement.case_result_id == CaseResultRow.id)
             .join(Job, CaseResultRow.job_id == Job.id).order_by(Measurement.id))
    if series_ids is not None:
        ids = list(series_ids)
        if not ids:
            return {}
        query = query.where(Measurement.series_id.in_(ids))
    measured: dict[int, dict[int, list[tuple[str, float, str | None]]]] = defaultdict(lambda: defaultdict(list))
    for series_id, commit_id, run_id, median, digest in session.execute(query):
        if commit_id in position:
            measured[series_id][commit_id].append((run_id, median, digest))
    out: dict[int, _History] = {}
    for series_id, values in measured.items():
        commits = sorted(values, key=position.__getitem__)
        # a commit's value combines all its runs (`history.commit_level`); its binary: the newest run's
        levels = [commit_level((r, m) for r, m, _ in values[c])[0] for c in commits]
        digests = [values[c][-1][2] for c in commits[-NOISE_HISTORY:]]
        out[series_id] = _History(np.array(commits, dtype=np.int64), np.array(levels, dtype=np.float64),
                                  digests, len(commits))
    return out


def _stored_change_points(session: Session, series_ids: Sequence[int]) -> dict[int, list[ChangePoint]]:
    """series id -> its stored change points: one query per 1,000 series (not one per series)."""
    out: dict[int, list[ChangePoint]] = defaultdict(list)
    for i in range(0, len(series_ids), 1000):
        chunk = list(series_ids[i:i + 1000])
        for cp in session.scalars(sa.select(ChangePoint).where(ChangePoint.series_id.in_(chunk))
                                  .order_by(ChangePoint.id)):
            out[cp.series_id].append(cp)
    return out


def _note(cp: changepoints.ChangePoint, direction: str, lifecycle: str) -> str:
    what = "suspected" if lifecycle == "suspected" else "confirmed"
    return f"{what}: {direction} of {cp.magnitude:+.1%} (p={cp.pvalue:.2g})"


def _retraction_reason(values: Sequence[float] | np.ndarray, index: int, row: ChangePoint,
                       analysed: changepoints.Analysis, window: int) -> str:
    """Why the history no longer supports a stored change point (module doc)."""
    if index in analysed.outliers:
        return (f"its commit's run ({values[index]:.4g}) is an outlier: the commits around it stay at the level "
                f"before ({row.before_level:.4g}); it was reported as {row.magnitude:+.1%}")
    kept = [v for i, v in enumerate(values[index:index + window], start=index) if i not in analysed.outliers]
    later = sum(kept) / len(kept) if kept else row.after_level
    change = later / row.before_level - 1.0 if row.before_level else 0.0
    return (f"not supported by the {len(values) - index} commits from it: they average {later:.4g}, "
            f"{change:+.1%} from the level before ({row.before_level:.4g}); it was reported as {row.magnitude:+.1%} "
            f"(p={row.pvalue:.2g})")


def _event(session: Session, row: ChangePoint, now: datetime, note: str) -> None:
    """A lifecycle event: the triage state kept, the note says what the analysis changed."""
    session.add(TriageEvent(change_point_id=row.id, state=row.state, who=ANALYSIS_WHO, at=now, note=note))


def _min_magnitude(series: Any, settings: AnalysisSettings) -> float:
    return float(series.min_magnitude) if series.min_magnitude is not None else settings.min_magnitude


def _analyses(histories: dict[int, _History], rows: dict[int, Any],
              settings: AnalysisSettings) -> dict[int, changepoints.Analysis]:
    """series id -> `changepoints.analyse` of its history stretch, on the analysis workers."""
    jobs = [workers.Job(series_id, histories[series_id].values, _min_magnitude(rows[series_id], settings))
            for series_id in sorted(rows) if series_id in histories
            and histories[series_id].values.size >= 2 * settings.min_size]
    return workers.shared(settings.processes or workers.default_processes()).analyse(jobs, settings)


def _analyze(session: Session, series: Any, history: _History, analysed: changepoints.Analysis,
             commit_of: Callable[[int], ChainCommit], settings: AnalysisSettings, *, stored: Sequence[ChangePoint],
             tally: _Tally, now: datetime) -> dict[str, Any]:
    """Bring one series' stored change points from `judged_from` in line with the analysis of its
    history stretch (module doc). `series`: its row (id, min_magnitude, lower_is_better, metric);
    `stored`: its change points already stored. Returns the series' analysis state to write."""
    values = history.values
    recent = values[-NOISE_HISTORY:]
    state = {"id": series.id, "history_points": history.length, "analyzed_at": now,
             "noise_unpaired": stats.run_to_run_noise([float(v) for v in recent], history.digests[-recent.size:])}
    min_magnitude = _min_magnitude(series, settings)
    judged = history.judged_from - history.offset   # stretch positions from which points are judged
    found = [(cp, "confirmed") for cp in analysed.confirmed] + [(cp, "suspected") for cp in analysed.pending]
    if analysed.suspected is not None:
        found.append((analysed.suspected, "suspected"))
    found = [(cp, lifecycle) for cp, lifecycle in found if cp.index >= judged]
    if not found and not stored:
        return state
    index_of = {int(c): i for i, c in enumerate(history.commit_ids)}
    lower_is_better = series_direction(series)

    def held(row: ChangePoint) -> bool:
        """A confirmed point that the history no longer confirms stays confirmed while it holds (hysteresis)."""
        if row.lifecycle != "confirmed":
            return False
        at = index_of[row.after_commit_id]
        neighbours = {cp.index for cp, _ in found} | {index_of[r.after_commit_id] for r in here
                                                       if r.lifecycle != "retracted"}
        return changepoints.holds(values, at, row.magnitude > 0, neighbours=sorted(neighbours - {at}),
                                  outliers=analysed.outliers, window=settings.window, min_magnitude=min_magnitude,
                                  min_size=settings.min_size, pvalue=settings.hold_pvalue)

    # points of a rewritten history and settled ones (before `judged`) stay as they are
    here = [row for row in stored if index_of.get(row.after_commit_id, -1) >= judged]
    at_commit = {row.after_commit_id: row for row in stored}
    matched: set[int] = set()
    for cp, lifecycle in found:
        direction = changepoints.classify(cp, lower_is_better)
        before = commit_of(int(history.commit_ids[cp.last_before]))
        after = commit_of(int(history.commit_ids[cp.index]))
        row = at_commit.get(after.id)
        if row is None or row.id in matched:
            row = next((r for r in here if r.id not in matched and r.lifecycle != "retracted"
                        and r.direction == direction and abs(index_of[r.after_commit_id] - cp.index) < settings.min_size),
                       None)
        fields = {"before_commit_id": before.id, "history_index": cp.index + history.offset,
                  "before_level": cp.before_mean, "after_level": cp.after_mean, "magnitude": cp.magnitude,
                  "pvalue": cp.pvalue}
        if row is None:
            row_id = _insert_change_point(session, {
                "series_id": series.id, "after_commit_id": after.id, "committed_at": after.committed_at,
                "direction": direction, "state": "needs triage", "detected_at": now, "lifecycle": lifecycle,
                "confirmed_at": now if lifecycle == "confirmed" else None, "reason": "", **fields})
            if row_id is None:  # another transaction stored it first
                continue
            session.add(TriageEvent(change_point_id=row_id, state="needs triage", who=ANALYSIS_WHO, at=now,
                                    note=_note(cp, direction, lifecycle)))
            matched.add(row_id)
            tally.added += 1
            tally.confirmed += lifecycle == "confirmed"
            continue
        matched.add(row.id)
        notes = []
        if row.after_commit_id != after.id and after.id not in at_commit:
            notes.append(f"moved to commit {after.sha[:10]}")
            del at_commit[row.after_commit_id]
            row.after_commit_id, row.committed_at = after.id, after.committed_at
            at_commit[after.id] = row
        if lifecycle == "suspected" and held(row):
            lifecycle = "confirmed"
        if row.lifecycle != lifecycle:
            notes.append(("stands again, " if row.lifecycle == "retracted" else "") + _note(cp, direction, lifecycle))
            if lifecycle == "confirmed":
                row.confirmed_at = now
                tally.confirmed += 1
            row.lifecycle, row.retracted_at, row.reason = lifecycle, None, ""
        for name, value in fields.items():
            setattr(row, name, value)
        if notes:
            _event(session, row, now, "; ".join(notes))
    for row in here:
        if row.id in matched or row.lifecycle == "retracted" or held(row):
            continue
        row.reason = _retraction_reason(values, index_of[row.after_commit_id], row, analysed, settings.window)
        row.lifecycle, row.retracted_at = "retracted", now
        _event(session, row, now, f"retracted: {row.reason}")
        tally.retracted += 1
    return state


def _insert_change_point(session: Session, row: dict[str, object]) -> int | None:
    """INSERT ... ON CONFLICT (series, after commit) DO NOTHING RETURNING id: None when it existed."""
    statement = (dialect_insert(session, ChangePoint.__table__).values(**row)
                 .on_conflict_do_nothing(index_elements=["series_id", "after_commit_id"])
                 .returning(ChangePoint.id))
    return session.scalar(statement)


def _series_repositories(session: Session, series_ids: Iterable[int] | None) -> list[int]:
    """Repositories with measurements in these series (all series: every repository with a commit)."""
    if series_ids is None:
        return list(session.scalars(sa.select(Repository.id).order_by(Repository.id)))
    return list(session.scalars(
        sa.select(Commit.repository_id).distinct().join(Measurement, Measurement.commit_id == Commit.id)
        .where(Measurement.series_id.in_(list(series_ids)))))


@dataclass(frozen=True)
class _Tail:
    """A series' newest commits as its last analysis in this process left them, and the analysis
    state it wrote (`Series.history_points`, `Series.analyzed_at`): valid while the store still
    holds that state (nobody else analysed the series since, and that transaction committed)."""

    history: _History
    history_points: int
    analyzed_at: datetime
    first_position: int
    """chain positions of its first and newest commits: a chain that changed under them (grew at its
    start, a commit recorded in between, rewritten) no longer matches"""
    newest_position: int


class _Tails:
    """The tails of the series this process analysed last (module doc, incremental): a bounded
    LRU, shared by the threads of one process."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[tuple[str, int, int], _Tail] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int, int]) -> _Tail | None:
        """key: (the store's URL, repository id, series id)."""
        with self._lock:
            tail = self._items.get(key)
            if tail is not None:
                self._items.move_to_end(key)
            return tail

    def put(self, key: tuple[str, int, int], tail: _Tail) -> None:
        with self._lock:
            self._items[key] = tail
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)


TAILS = _Tails(TAIL_CACHE_SERIES)


def _extended(tail: _Tail, position: dict[int, int], commit_id: int, level: float,
              digest: str | None) -> _History | None:
    """The tail's history with the commit added (or its newest commit's level replaced: a rerun of
    it), when the chain still holds the tail where it was and the commit is not older than its
    newest one; None otherwise (the caller reads the history again)."""
    at = position[commit_id]
    history = tail.history
    ids, values = history.commit_ids, history.values
    if (not ids.size or position.get(int(ids[0])) != tail.first_position
            or position.get(int(ids[-1])) != tail.newest_position or tail.newest_position > at):
        return None
    digests = list(history.digests)
    if tail.newest_position == at:   # another run of the newest commit: its level combines them all
        digests[-1] = digest
        return _History(ids, np.append(values[:-1], level), digests, history.length)
    return _History(np.append(ids, commit_id), np.append(values, level), (digests + [digest])[-NOISE_HISTORY:],
                    history.length + 1)


def _store_key(session: Session) -> str:
    return session.get_bind().engine.url.render_as_string(hide_password=True)


def _remember(store: str, repository_id: int, histories: dict[int, _History], position: dict[int, int], window: int,
              analyzed_at: datetime) -> None:
    """Keep each analysed series' newest commits that its next upload's analysis needs (`stretch_start`)."""
    keep = TAIL_WINDOWS * window + max(1, window // 2)
    for series_id, history in histories.items():
        ids = history.commit_ids[-keep:]
        if not ids.size:
            continue
        kept = _History(ids.copy(), history.values[-keep:].copy(), list(history.digests[-NOISE_HISTORY:]),
                        history.length)
        TAILS.put((store, repository_id, series_id), _Tail(kept, history.length, analyzed_at, position[int(ids[0])],
                                                    position[int(ids[-1])]))


def _series_rows(session: Session, series_ids: Sequence[int], *, lock: bool) -> dict[int, Any]:
    """series id -> (id, min_magnitude, lower_is_better, metric, history_points, analyzed_at); with
    `lock`, the rows locked in id order (PostgreSQL; SQLite serialises writers anyway) so that two
    uploads of one device class analyse one after the other, each seeing the other's commit."""
    table = Series.__table__
    rows: dict[int, Any] = {}
    ordered = sorted(series_ids)
    for i in range(0, len(ordered), 1000):
        query = (sa.select(table.c.id, table.c.min_magnitude, table.c.lower_is_better, table.c.metric,
                           table.c.history_points, table.c.analyzed_at)
                 .where(table.c.id.in_(ordered[i:i + 1000])).order_by(table.c.id))
        rows.update((r.id, r) for r in session.execute(query.with_for_update() if lock else query))
    return rows


def _reconcile(session: Session, histories: dict[int, _History], rows: dict[int, Any], chain: Sequence[ChainCommit],
               settings: AnalysisSettings, tally: _Tally) -> datetime:
    """Analyse each series and write its analysis state (one executemany UPDATE); returns its time."""
    stored = _stored_change_points(session, sorted(rows))
    by_id = {c.id: c for c in chain}
    empty = _History(np.zeros(0, dtype=np.int64), np.zeros(0), [], 0)
    now = utcnow()
    analysed = _analyses(histories, rows, settings)
    nothing = changepoints.Analysis([], None)
    states = [_analyze(session, rows[series_id], histories.get(series_id, empty), analysed.get(series_id, nothing),
                       by_id.__getitem__, settings, stored=stored.get(series_id, []), tally=tally, now=now)
              for series_id in sorted(rows)]
    if states:
        table = Series.__table__
        session.execute(table.update().where(table.c.id == sa.bindparam("b_id")),
                        [{"b_id": st.pop("id"), **st} for st in states])
        for loaded in [o for o in session.identity_map.values() if isinstance(o, Series) and o.id in rows]:
            session.expire(loaded, ["history_points", "analyzed_at", "noise_unpaired"])
    return now


def _run(session: Session, series_ids: list[int] | None, settings: AnalysisSettings, *,
         repository_ids: list[int] | None = None) -> AnalysisSummary:
    """The batch analysis: every series' whole history (module doc); their tails rebuilt."""
    repositories = repository_ids if repository_ids is not None else _series_repositories(session, series_ids)
    analysed: set[int] = set()
    tally = _Tally()
    for repository_id in repositories:
        chain = default_branch_chain(session, repository_id)
        position = {c.id: i for i, c in enumerate(chain)}
        every = series_ids if series_ids is not None else list(session.scalars(sa.select(Series.id).order_by(Series.id)))
        for i in range(0, len(every), BATCH_SERIES):   # a bounded part of the histories in memory at a time
            chunk = every[i:i + BATCH_SERIES]
            histories = _histories(session, chain, chunk)
            wanted = sorted(chunk if series_ids is not None else histories)
            analyzed_at = _reconcile(session, histories, _series_rows(session, wanted, lock=False), chain, settings,
                                     tally)
            _remember(_store_key(session), repository_id, histories, position, settings.window, analyzed_at)
            analysed.update(wanted)
    session.flush()  # the series' history_points / analyzed_at: one batched UPDATE, not one per series
    return AnalysisSummary(series=len(analysed), new_change_points=tally.added, confirmed=tally.confirmed,
                           retracted=tally.retracted)


def _run_incremental(session: Session, commit_id: int, series_ids: list[int], repository_id: int,
                     settings: AnalysisSettings) -> AnalysisSummary:
    """After an upload of `commit_id`: each series' tail with the commit's level added, its newest
    stretch analysed (module doc, incremental); a series without a valid tail is read whole."""
    chain = default_branch_chain(session, repository_id)
    position = {c.id: i for i, c in enumerate(chain)}
    if commit_id not in position:   # not on the default-branch history: it changes no series' history
        return AnalysisSummary(0, 0)
    rows = _series_rows(session, series_ids, lock=True)
    levels: dict[int, list[tuple[str, float, str | None]]] = defaultdict(list)
    for chunk in range(0, len(series_ids), 1000):
        for series_id, run_id, median, digest in session.execute(
            sa.select(Measurement.series_id, Job.run_id, Measurement.median, CaseResultRow.binary_digest)
            .join(CaseResultRow, Measurement.case_result_id == CaseResultRow.id)
            .join(Job, CaseResultRow.job_id == Job.id)
            .where(Measurement.commit_id == commit_id, Measurement.series_id.in_(series_ids[chunk:chunk + 1000]))
            .order_by(Measurement.id)):
            levels[series_id].append((run_id, median, digest))
    histories: dict[int, _History] = {}
    store = _store_key(session)
    for series_id, row in rows.items():
        tail, runs = TAILS.get((store, repository_id, series_id)), levels.get(series_id)
        if tail is None or not runs or (tail.history_points, tail.analyzed_at) != (row.history_points,
                                                                                  row.analyzed_at):
            continue
        extended = _extended(tail, position, commit_id, commit_level((r, m) for r, m, _ in runs)[0],
                             runs[-1][2])
        if extended is not None:
            histories[series_id] = extended
    missing = [i for i in rows if i not in histories]
    if missing:
        histories.update(_histories(session, chain, missing))
    tally = _Tally()
    stretches = {i: h.stretch(settings.window) for i, h in histories.items()}
    analyzed_at = _reconcile(session, stretches, rows, chain, settings, tally)
    _remember(store, repository_id, histories, position, settings.window, analyzed_at)
    session.flush()
    return AnalysisSummary(series=len(rows), new_change_points=tally.added, confirmed=tally.confirmed,
                           retracted=tally.retracted)


def analyze_series(session: Session, series_id: int, settings: AnalysisSettings) -> AnalysisSummary:
    """Analyse one series (module doc) on the default branch of every repository it has
    measurements of, and bring its stored change points in line. Idempotent."""
    return _run(session, [series_id], settings)


def analyze_after_ingest(session: Session, document: ResultDocument, settings: AnalysisSettings) -> AnalysisSummary:
    """The ingest path's hook: analyse the series this document's ok results touched, when its run
    is a push, nightly or local run or its commit is recorded on the default branch; nothing
    otherwise (a pull request's commits are not default-branch history).

    Cost: the default-branch chain (one query over the repository's commits), the touched series'
    rows, this commit's measurements and their stored change points (one query each), and
    `changepoints.analyse` of each touched series' newest stretch (module doc, incremental).
    Idempotent: a document uploaded again changes nothing."""
    job = session.get(Job, document.job_id)
    if job is None:
        return AnalysisSummary(0, 0)
    run: Run = job.run
    commit = run.commit
    if run.kind not in ANALYZED_RUN_KINDS and commit.branch != run.repository.default_branch:
        return AnalysisSummary(0, 0)
    series_ids = list(session.scalars(
        sa.select(Measurement.series_id).distinct().join(Series, Measurement.series_id == Series.id)
        .where(Measurement.commit_id == commit.id, Series.device_class_id == job.device_class_id)))
    if not series_ids:
        return AnalysisSummary(0, 0)
    return _run_incremental(session, commit.id, series_ids, run.repository_id, settings)


def reanalyze_all(session: Session, settings: AnalysisSettings) -> AnalysisSummary:
    """Analyse every series' whole history as after an upload (the same function: module doc):
    new change points stored, stored ones confirmed or retracted, their triage kept. Loads each
    repository's chain once and all measurements' medians in one query."""
    summary = _run(session, None, settings)
    log.info("re-analysed %d series: %d new change points, %d confirmed, %d retracted", summary.series,
             summary.new_change_points, summary.confirmed, summary.retracted)
    return summary


def learn_paired_noise(session: Session, job_id: str) -> int:
    """Update `Series.noise_paired` (module doc) of the series in which this job stored A/A
    calibrations; returns how many series. Idempotent."""
    calibration = sa.and_(CaseResultRow.binary_digest.is_not(None),
                          CaseResultRow.binary_digest == CaseResultRow.paired_binary_digest)
    series_ids = list(session.scalars(
        sa.select(Measurement.series_id).distinct().join(CaseResultRow, Measurement.case_result_id == CaseResultRow.id)
        .where(CaseResultRow.job_id == job_id, calibration)))
    if not series_ids:
        return 0
    found: dict[int, list[tuple[int, int, list[int] | None]]] = defaultdict(list)
    for series_id, result_id, measurement_id, rounds in session.execute(
        sa.select(Measurement.series_id, CaseResultRow.id, Measurement.id, Measurement.round_sizes)
        .join(CaseResultRow, Measurement.case_result_id == CaseResultRow.id)
        .where(Measurement.series_id.in_(series_ids), calibration).order_by(Measurement.id.desc())
    ):
        if len(found[series_id]) < NOISE_HISTORY:
            found[series_id].append((result_id, measurement_id, rounds))
    changes = paired_changes(session, [r for results in found.values() for r in results])
    for series in session.scalars(sa.select(Series).where(Series.id.in_(series_ids))):
        values = [c for r, _, _ in found[series.id] if (c := changes[r]) is not None]
        series.noise_paired = stats.paired_noise(values)
    session.flush()
    return len(series_ids)
