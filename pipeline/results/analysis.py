"""History analysis: change points in each series' default-branch history, stored for triage.

A series' history is one value per commit of the repository's default-branch history
(`history.default_branch_chain`: the first-parent chain of the default-branch head) that has a
measurement in the series, oldest first; the value is the median of the commit's newest
measurement (a rerun replaces the earlier one, as everywhere in the store). `changepoints` finds
the changes of level; each becomes a `ChangePoint` row, state "needs triage", with a first triage
event by `ANALYSIS_WHO`.

Incremental: `analyze_series` hands the stored change points to `changepoints.detect_new` as
what is already known, so only the tail of the history is analysed again. It never stores a
change point twice: one already stored at the same commit is kept as it is (with its triage), and
one found within `min_size` commits of a stored one of the same direction is taken to be that one
seen again (a young change point can move by a commit as its new level fills in). Change points
that later data no longer supports are not deleted (they may carry triage): a person marks them
noisy. Concurrent ingests of one series are safe: the row's uniqueness on (series, after commit)
and an insert that ignores conflicts make the second writer skip it.

Direction: the series' `lower_is_better` when set, else the metric's (`pipeline.contracts.METRICS`);
a change point is a regression or an improvement accordingly (`changepoints.classify`). Minimum
magnitude: the series' `min_magnitude` when set, else `AnalysisSettings.min_magnitude`.

"intended" rebases the series (Dana: it moves the base): change points at or before a series'
newest intended change point no longer count as open (dashboard, regressions list), since the
level they led to has been accepted, and `baseline` reports the intended change point's new level
as the series' reference. Detection itself needs no rebase: each change point is tested against
its neighbouring levels, so the level after an intended change is what later changes are
measured against. PR verdicts compare with the base commit's own samples, which already show
whatever level was current there.

Noise (the verdict's threshold is max(floor, k x noise), `stats.threshold`), kept on the series:
- `Series.noise_unpaired`, each time a series is analysed: `stats.run_to_run_noise` over its
  last `NOISE_HISTORY` default-branch commits (their medians, and the binaries they timed: pairs
  of runs of one binary are preferred). No sample is read.
- `Series.noise_paired`, by `learn_paired_noise` after every ingest that stored A/A calibrations
  (paired results whose base timed the same binary, `binary_digest == paired_binary_digest`), of
  any run kind: `stats.paired_noise` of the paired changes of the series' last `NOISE_HISTORY`
  calibrations. Only those series, only those results' samples are read: an ingest without
  calibrations costs one query.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.config import AnalysisSettings
from pipeline.contracts import METRICS, ResultDocument
from pipeline.results import changepoints, stats
from pipeline.results.compare import paired_changes
from pipeline.results.history import (
    FALLBACK_RUN_KINDS,
    ChainCommit,
    default_branch_chain,
)
from pipeline.results.models import (
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
NOISE_HISTORY = 30
"""Newest default-branch commits (unpaired) or A/A calibrations (paired) a series' noise is learned from."""


@dataclass(frozen=True)
class AnalysisSummary:
    series: int
    """series analysed"""
    new_change_points: int


@dataclass(frozen=True)
class _Point:
    commit: ChainCommit
    value: float
    digest: str | None = None
    """the binary the measurement timed (None: not reported)"""


def series_direction(series: Series) -> bool:
    """lower_is_better for the series: its own setting, else its metric's."""
    if series.lower_is_better is not None:
        return series.lower_is_better
    return METRICS[series.metric].lower_is_better


def _histories(session: Session, chain: Sequence[ChainCommit], series_ids: Iterable[int] | None) -> dict[int, list[_Point]]:
    """series id -> its history on `chain` (module doc), oldest first. One query."""
    position = {c.id: i for i, c in enumerate(chain)}
    if not position:
        return {}
    query = (sa.select(Measurement.series_id, Measurement.commit_id, Measurement.median, CaseResultRow.binary_digest)
             .join(CaseResultRow, Measurement.case_result_id == CaseResultRow.id).order_by(Measurement.id))
    if series_ids is not None:
        ids = list(series_ids)
        if not ids:
            return {}
        query = query.where(Measurement.series_id.in_(ids))
    newest: dict[int, dict[int, tuple[float, str | None]]] = defaultdict(dict)
    for series_id, commit_id, median, digest in session.execute(query):
        if commit_id in position:
            newest[series_id][commit_id] = (median, digest)  # ordered by id: the last one wins
    return {
        series_id: [_Point(chain[position[c]], v, d)
                    for c, (v, d) in sorted(values.items(), key=lambda kv: position[kv[0]])]
        for series_id, values in newest.items()
    }


def _stored_change_points(session: Session, series_ids: Sequence[int]) -> dict[int, list[ChangePoint]]:
    """series id -> its stored change points: one query per 1,000 series (not one per series)."""
    out: dict[int, list[ChangePoint]] = defaultdict(list)
    for i in range(0, len(series_ids), 1000):
        chunk = list(series_ids[i:i + 1000])
        for cp in session.scalars(sa.select(ChangePoint).where(ChangePoint.series_id.in_(chunk))):
            out[cp.series_id].append(cp)
    return out


def _analyze(session: Session, series: Series, points: list[_Point], settings: AnalysisSettings, *,
             incremental: bool, stored: Sequence[ChangePoint]) -> int:
    """Detect on one series' history and store what is new; returns how many change points were stored.
    `stored`: the series' change points already stored."""
    now = utcnow()
    series.history_points = len(points)
    series.analyzed_at = now
    recent = points[-NOISE_HISTORY:]
    series.noise_unpaired = stats.run_to_run_noise([p.value for p in recent], [p.digest for p in recent])
    if len(points) < 2 * settings.min_size:
        return 0
    values = [p.value for p in points]
    index_of = {p.commit.id: i for i, p in enumerate(points)}
    stored_at = sorted((index_of[cp.after_commit_id], cp) for cp in stored if cp.after_commit_id in index_of)
    min_magnitude = series.min_magnitude if series.min_magnitude is not None else settings.min_magnitude
    options: dict[str, Any] = {"window": settings.window, "max_pvalue": settings.max_pvalue,
                               "min_magnitude": min_magnitude, "min_size": settings.min_size}
    if incremental:
        known = [changepoints.ChangePoint(i, cp.before_level, cp.after_level, cp.magnitude, cp.pvalue)
                 for i, cp in stored_at]
        found = changepoints.detect_new(values, known, **options)
    else:
        found = changepoints.detect(values, **options)
    lower_is_better = series_direction(series)
    added = 0
    for cp in found:
        direction = changepoints.classify(cp, lower_is_better)
        if any(abs(i - cp.index) < settings.min_size and (i == cp.index or row.direction == direction)
               for i, row in stored_at):
            continue
        before, after = points[cp.index - 1].commit, points[cp.index].commit
        change_point_id = _insert_change_point(session, {
            "series_id": series.id, "before_commit_id": before.id, "after_commit_id": after.id,
            "committed_at": after.committed_at, "history_index": cp.index, "before_level": cp.before_mean,
            "after_level": cp.after_mean, "magnitude": cp.magnitude, "pvalue": cp.pvalue, "direction": direction,
            "state": "needs triage", "detected_at": now,
        })
        if change_point_id is None:  # another transaction stored it first
            continue
        session.add(TriageEvent(change_point_id=change_point_id, state="needs triage", who=ANALYSIS_WHO, at=now,
                                note=f"{direction} of {cp.magnitude:+.1%} (p={cp.pvalue:.2g}) detected"))
        added += 1
    return added


def _insert_change_point(session: Session, row: dict[str, object]) -> int | None:
    """INSERT ... ON CONFLICT (series, after commit) DO NOTHING RETURNING id: None when it existed."""
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    statement = (insert(ChangePoint.__table__).values(**row)
                 .on_conflict_do_nothing(index_elements=["series_id", "after_commit_id"])
                 .returning(ChangePoint.__table__.c.id))
    return session.scalar(statement)


def _series_repositories(session: Session, series_ids: Iterable[int] | None) -> list[int]:
    """Repositories with measurements in these series (all series: every repository with a commit)."""
    if series_ids is None:
        return list(session.scalars(sa.select(Repository.id).order_by(Repository.id)))
    return list(session.scalars(
        sa.select(Commit.repository_id).distinct().join(Measurement, Measurement.commit_id == Commit.id)
        .where(Measurement.series_id.in_(list(series_ids)))))


def _run(session: Session, series_ids: list[int] | None, settings: AnalysisSettings, *, incremental: bool,
         repository_ids: list[int] | None = None) -> AnalysisSummary:
    repositories = repository_ids if repository_ids is not None else _series_repositories(session, series_ids)
    analysed: set[int] = set()
    added = 0
    for repository_id in repositories:
        chain = default_branch_chain(session, repository_id)
        histories = _histories(session, chain, series_ids)
        wanted = series_ids if series_ids is not None else list(histories)
        rows = {s.id: s for i in range(0, len(wanted), 1000)
                for s in session.scalars(sa.select(Series).where(Series.id.in_(list(wanted[i:i + 1000]))))}
        stored = _stored_change_points(session, sorted(rows))
        for series_id in sorted(rows):
            added += _analyze(session, rows[series_id], histories.get(series_id, []), settings, incremental=incremental,
                              stored=stored.get(series_id, []))
            analysed.add(series_id)
    session.flush()  # the series' history_points / analyzed_at: one batched UPDATE, not one per series
    return AnalysisSummary(series=len(analysed), new_change_points=added)


def analyze_series(session: Session, series_id: int, settings: AnalysisSettings) -> AnalysisSummary:
    """Analyse one series incrementally (module doc) on the default branch of every repository
    it has measurements of; stores new change points and returns how many. Idempotent."""
    return _run(session, [series_id], settings, incremental=True)


def analyze_after_ingest(session: Session, document: ResultDocument, settings: AnalysisSettings) -> AnalysisSummary:
    """The ingest path's hook: analyse the series this document's ok results touched, when its run
    is a push, nightly or local run or its commit is recorded on the default branch; nothing
    otherwise (a pull request's commits are not default-branch history).

    Cost: the default-branch chain (one query over the repository's commits), the touched series'
    measurements (one query), and `detect_new` on each series' tail (at most 3 windows of commits).
    Idempotent: a document uploaded again finds nothing new."""
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
    return _run(session, series_ids, settings, incremental=True, repository_ids=[run.repository_id])


def reanalyze_all(session: Session, settings: AnalysisSettings) -> AnalysisSummary:
    """Analyse every series' whole history from scratch with `changepoints.detect` (not the
    incremental tail), adding change points that are not stored yet; stored ones and their triage
    stay. Loads each repository's chain once and all measurements' medians in one query."""
    summary = _run(session, None, settings, incremental=False)
    log.info("re-analysed %d series, %d new change points", summary.series, summary.new_change_points)
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
