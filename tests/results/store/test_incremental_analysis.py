"""The analysis after an upload reads the series' tail (`analysis`, "Incremental"), not its whole
history, and stores what a batch analysis of the whole history reports; a tail that no longer fits
(an older commit measured again, a rerun, a series analysed by another process) is read again from
the measurements."""

from __future__ import annotations

import random

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from pipeline.results.analysis import changepoints
from pipeline.config import AnalysisSettings
from pipeline.results.store import analysis, ingest
from pipeline.results.store.db import session_scope
from pipeline.results.store.history import commit_level, default_branch_chain
from pipeline.results.store.models import CaseResultRow, ChangePoint, Job, Measurement, Repository, Series

from tests.helpers import factories as f

SETTINGS = AnalysisSettings()
LENGTH = 2 * analysis.TAIL_WINDOWS * SETTINGS.window + 30
"""Commits on main: long enough that the newest uploads analyse a stretch, not the whole history."""
LEVELS = {0: 1e-3, 60: 1.1e-3, 170: 0.95e-3, 290: 1.12e-3, 400: 1.0e-3}
"""first commit of each level -> level (seconds)"""
OUTLIERS = {45, 130, 241, 333}


def level(i: int) -> float:
    value = LEVELS[max(k for k in LEVELS if k <= i)] * (1 + random.Random(i).gauss(0, 0.004))
    return value * 1.3 if i in OUTLIERS else value


def main(i: int) -> str:
    return f"main-{i}"


def upload(s: Session, i: int, value: float | None = None) -> None:
    f.upload(s, main(i), [f.ok(f.GEMM, f.series_samples(level(i) if value is None else value))], kind="push")


@pytest.fixture
def long_history(seeded: Engine) -> Engine:
    with session_scope(seeded) as s:
        ingest.record_commits(s, repository=f.REPO, commits=[
            f.commit(main(i), *([main(i - 1)] if i else [3]), minutes=10 + i, branch="main") for i in range(LENGTH)])
    for i in range(LENGTH):
        with session_scope(seeded) as s:
            upload(s, i)
    return seeded


def _whole_history(s: Session) -> tuple[int, list[int], list[float]]:
    """(series id, chain commit ids, levels) of the GEMM series' whole default-branch history."""
    series_id = s.scalar(sa.select(Series.id).where(Series.metric == "latency"))
    assert series_id is not None
    repository = s.scalar(sa.select(Repository.id))
    chain = default_branch_chain(s, repository)
    runs: dict[int, list[tuple[str, float]]] = {}
    for commit_id, run_id, median in s.execute(
            sa.select(Measurement.commit_id, Job.run_id, Measurement.median)
            .join(CaseResultRow, Measurement.case_result_id == CaseResultRow.id)
            .join(Job, CaseResultRow.job_id == Job.id).where(Measurement.series_id == series_id)):
        runs.setdefault(commit_id, []).append((run_id, median))
    ids = [c.id for c in chain if c.id in runs]
    return series_id, ids, [commit_level(runs[c])[0] for c in ids]


def _tail(s: Session, series_id: int) -> analysis._Tail:
    tail = analysis.TAILS.get((s.get_bind().engine.url.render_as_string(hide_password=True),
                               s.scalar(sa.select(Repository.id)) or 0, series_id))
    assert tail is not None
    return tail


def _batch(values: list[float]) -> set[int]:
    found = changepoints.analyse(values, window=SETTINGS.window, max_pvalue=SETTINGS.max_pvalue,
                                 min_magnitude=SETTINGS.min_magnitude, min_size=SETTINGS.min_size,
                                 confirm_size=SETTINGS.confirm_size, confirm_pvalue=SETTINGS.confirm_pvalue)
    return {cp.index for cp in found.confirmed + found.pending + ([found.suspected] if found.suspected else [])}


def _standing(s: Session, series_id: int, ids: list[int]) -> set[int]:
    index = {c: i for i, c in enumerate(ids)}
    return {index[cp.after_commit_id] for cp in s.scalars(
        sa.select(ChangePoint).where(ChangePoint.series_id == series_id, ChangePoint.lifecycle != "retracted"))}


def uploads_analysed_from_the_tail_store_what_the_batch_analysis_of_the_whole_history_reports(
        long_history: Engine) -> None:
    with session_scope(long_history) as s:
        series_id, ids, values = _whole_history(s)
        tail = _tail(s, series_id)
        assert tail.history_points == len(ids) == LENGTH
        held = tail.history.values
        assert held.size < LENGTH and list(held) == values[-held.size:]
        batch = _batch(values)
        assert batch >= {60, 170, 290, 400} and _standing(s, series_id, ids) == batch
        # and the store's own batch analysis (every series' whole history) changes nothing
        before = f.snapshot(s)["change_points"]
        analysis.reanalyze_all(s, SETTINGS)
        assert f.snapshot(s)["change_points"] == before


def an_older_commit_measured_again_rebuilds_the_tail_and_the_points_follow(long_history: Engine) -> None:
    with session_scope(long_history) as s:   # two more runs of main-100, a level of its own: now an outlier
        upload(s, 100, 2e-3)
    with session_scope(long_history) as s:
        upload(s, 100, 2e-3)
    with session_scope(long_history) as s:   # a rerun of the newest commit: its level combines its runs
        upload(s, LENGTH - 1, 1.5e-3)
    with session_scope(long_history) as s:
        upload(s, LENGTH - 1, 1.5e-3)
    with session_scope(long_history) as s:
        series_id, ids, values = _whole_history(s)
        assert values[100] == pytest.approx(2e-3, rel=0.01) and values[-1] == pytest.approx(1.5e-3, rel=0.01)
        tail = _tail(s, series_id)
        assert tail.history_points == LENGTH
        held = tail.history.values
        assert list(held) == values[-held.size:]
        assert _standing(s, series_id, ids) == _batch(values)


def a_series_analysed_by_another_process_or_none_is_read_whole(long_history: Engine,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    with session_scope(long_history) as s:   # another process analysed it since: its state is not ours
        s.execute(sa.update(Series).values(analyzed_at=None))
        upload(s, LENGTH - 1, 1.5e-3)
    monkeypatch.setattr(analysis, "TAILS", analysis._Tails(10))   # a process that analysed nothing yet
    with session_scope(long_history) as s:
        upload(s, LENGTH - 1, 1.5e-3)
    with session_scope(long_history) as s:
        series_id, ids, values = _whole_history(s)
        assert values[-1] == pytest.approx(1.5e-3, rel=0.01)
        assert list(_tail(s, series_id).history.values) == values[-_tail(s, series_id).history.values.size:]
        assert _standing(s, series_id, ids) == _batch(values)


def test_the_tail_analysis_stores_the_batch_analysis_as_reruns_and_other_processes_change_the_history(
        long_history: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The three stages in this order on one history (built once: ~15 s), each adding runs to it."""
    uploads_analysed_from_the_tail_store_what_the_batch_analysis_of_the_whole_history_reports(long_history)
    an_older_commit_measured_again_rebuilds_the_tail_and_the_points_follow(long_history)
    a_series_analysed_by_another_process_or_none_is_read_whole(long_history, monkeypatch)
