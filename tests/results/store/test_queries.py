"""Read-side helpers for the web pages and the API."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine

from pipeline.results.store import ingest
from pipeline.results.store.db import session_scope
from pipeline.results.store.queries import (
    get_run,
    get_series,
    list_runs,
    list_series,
    series_history,
)

from tests.helpers import factories as f


@pytest.fixture
def measured(seeded: Engine) -> tuple[Engine, list[str]]:
    """GEMM measured at c2, c0, c1 (stored in that order, so storage order is not time order),
    twice at c1; CONV at c0 only."""
    runs = []
    with session_scope(seeded) as s:
        runs.append(f.run_and_upload(s, 2, [f.ok(f.GEMM, f.series_samples(3e-3))])[0])
        runs.append(f.run_and_upload(s, 0, [f.ok(f.GEMM, f.series_samples(1e-3)), f.ok(f.CONV, f.series_samples(5e-3, n=6))])[0])
        runs.append(f.run_and_upload(s, 1, [f.ok(f.GEMM, f.series_samples(9e-3))])[0])
        runs.append(f.run_and_upload(s, 1, [f.ok(f.GEMM, f.series_samples(2e-3))])[0])
    return seeded, runs


def test_list_runs_newest_first_with_job_counts(measured: tuple[Engine, list[str]]) -> None:
    engine, runs = measured
    with session_scope(engine) as s:
        two_jobs = ingest.create_run(s, repository=f.REPO, commit_sha=f.sha(3), kind="nightly",
                                     device_classes=[f.DEVICE_CLASS, "other-cpu"])
        two_jobs.created_at += timedelta(days=1)
        listed = list_runs(s)
        assert listed[0].id == two_jobs.id and listed[0].job_count == 2 and listed[0].kind == "nightly"
        assert listed[0].commit_sha == f.sha(3) and listed[0].repository == f.REPO and listed[0].status == "queued"
        assert {r.id for r in listed[1:]} == set(runs) and {r.job_count for r in listed[1:]} == {1}
        assert len(list_runs(s, limit=2)) == 2


def test_get_run_with_jobs(measured: tuple[Engine, list[str]]) -> None:
    engine, runs = measured
    with session_scope(engine) as s:
        detail = get_run(s, runs[0])
        assert detail is not None and detail.run.id == runs[0] and detail.run.commit_sha == f.sha(2)
        assert [(j.device_class, j.status) for j in detail.jobs] == [(f.DEVICE_CLASS, "queued")]
        assert detail.run.created_at.tzinfo is not None
        assert get_run(s, "no-such-run") is None


def test_list_series_and_history_follow_commit_time(measured: tuple[Engine, list[str]]) -> None:
    engine, _ = measured
    with session_scope(engine) as s:
        series = {str(x.case_id): x for x in list_series(s)}
        assert set(series) == {f.GEMM, f.CONV}
        gemm = series[f.GEMM]
        assert (gemm.device_class, gemm.metric, gemm.points) == (f.DEVICE_CLASS, "latency", 3)
        assert gemm.latest_commit == f.sha(2) and gemm.latest_median == pytest.approx(3e-3)
        assert series[f.CONV].points == 1 and series[f.CONV].latest_commit == f.sha(0)
        assert len(list_series(s, limit=1)) == 1

        history = series_history(s, gemm.id)
        assert [p.sha for p in history] == [f.sha(0), f.sha(1), f.sha(2)]
        # c1 was measured by two runs (9e-3, then 2e-3): both kept, its point is the median of their levels
        assert [p.median for p in history] == pytest.approx([1e-3, 5.5e-3, 3e-3])
        assert [p.runs for p in history] == [1, 2, 1] and history[1].n == 20
        assert history[0].n == 10 and history[0].min == pytest.approx(0.99e-3) and history[0].max == pytest.approx(1.01e-3)
        assert history[0].committed_at < history[1].committed_at
        assert series_history(s, 123456) == []


def test_series_summaries_scoped_to_a_series_or_a_device_class(measured: tuple[Engine, list[str]]) -> None:
    engine, _ = measured
    with session_scope(engine) as s:
        f.run_and_upload(s, 3, [f.ok(f.GEMM, f.series_samples(7e-3))], device_class="other-cpu")
        everything = {(str(x.case_id), x.device_class): x for x in list_series(s)}
        assert len(everything) == 3
        mine = list_series(s, device_class=f.DEVICE_CLASS, metric="latency")
        assert mine == [everything[(f.CONV, f.DEVICE_CLASS)], everything[(f.GEMM, f.DEVICE_CLASS)]]
        (other,) = list_series(s, device_class="other-cpu")
        assert other.latest_commit == f.sha(3) and other.points == 1 and other.latest_median == pytest.approx(7e-3)
        assert list_series(s, metric="throughput") == [] and list_series(s, device_class="nope") == []
        gemm = everything[(f.GEMM, f.DEVICE_CLASS)]
        assert get_series(s, gemm.id) == gemm and get_series(s, 123456) is None
