"""Hardware counters in the store: series of their own, and what moved in a comparison's rows
(`pipeline.results.store.counters`), on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from pipeline.config import AnalysisSettings
from pipeline.config import CompareSettings
from pipeline.contracts import CaseResult
from pipeline.contracts.counters import COUNTERS_KEY, HardwareCounters
from pipeline.results.store.compare import compare
from pipeline.results.store.counters import counter_changes, counters_summary
from pipeline.results.store.db import session_scope
from pipeline.results.store.models import CounterValue, Series
from tests.helpers import factories as f

SETTINGS = CompareSettings(min_change=0.05, max_pvalue=0.01, min_samples=5, ancestor_walk=50)
BASE_COUNTS = {"instructions": 1_000_000.0, "dram_read_bytes": 4_194_304.0, "dram_write_bytes": 1_048_576.0,
               "l2_hit_rate": 61.25, "achieved_occupancy": 48.5}


def _with(result: CaseResult, counters: dict[str, float] | None = None, *, note: str | None = None,
          base: dict[str, float] | None = None) -> CaseResult:
    data: dict[str, Any] = result.model_dump()
    if counters is not None:
        data["counters"] = HardwareCounters(profiler="ncu 2025.3.1.0", values=counters).model_dump()  # type: ignore[arg-type]
    if note is not None:
        data["environment"] = {**data["environment"], COUNTERS_KEY: note}
    if base is not None:
        data["paired_base"]["counters"] = HardwareCounters(profiler="ncu 2025.3.1.0", values=base).model_dump()  # type: ignore[arg-type]
    return CaseResult.model_validate(data)


def _rows(engine: Engine, head: int) -> dict[str, Any]:
    with session_scope(engine) as s:
        comparison = compare(s, repository=f.REPO, head_sha=f.sha(head), device_class=f.DEVICE_CLASS, settings=SETTINGS)
    return {str(r.case_id): r for r in comparison.rows}


def test_counters_are_series_of_their_own_and_rows_say_what_moved(seeded: Engine) -> None:
    more_dram = {**BASE_COUNTS, "dram_read_bytes": BASE_COUNTS["dram_read_bytes"] * 1.18,
                 "dram_write_bytes": BASE_COUNTS["dram_write_bytes"] * 1.18}
    with session_scope(seeded) as s:
        f.run_and_upload(s, 0, [_with(f.ok(f.GEMM, f.series_samples(1e-3), binary="g0"), BASE_COUNTS),
                                _with(f.ok(f.CONV, f.series_samples(2e-3), binary="c0"), BASE_COUNTS)])
        f.run_and_upload(s, 1, [
            _with(f.ok(f.GEMM, f.series_samples(1.2e-3), binary="g1"), more_dram),
            _with(f.ok(f.CONV, f.series_samples(2e-3), binary="c1"), note="not available: ncu (Nsight Compute) not found"),
        ])
        # one series per counter, case and device class, beside latency's; one value per result
        metrics = set(s.scalars(sa.select(Series.metric)))
        assert metrics == {"latency", *BASE_COUNTS}
        assert s.scalar(sa.select(sa.func.count()).select_from(CounterValue)) == 3 * len(BASE_COUNTS)

    rows = _rows(seeded, 1)
    gemm, conv = rows[f.GEMM], rows[f.CONV]
    assert gemm.status in ("regressed", "inconclusive")   # the timing's verdict; the counters say why
    assert gemm.counters is not None
    assert gemm.counters.summary == "DRAM bytes +18 %, instructions +0 %"
    moved = {c.counter: c for c in gemm.counters.changes}
    assert moved["dram_read_bytes"].moved and moved["dram_read_bytes"].change == pytest.approx(0.18)
    assert not moved["instructions"].moved and moved["instructions"].change == 0.0
    assert moved["instructions"].base == moved["instructions"].head == 1_000_000.0
    # a head without counters says why, never "unchanged"
    assert conv.counters is not None and conv.counters.summary == "no counters: not available: ncu (Nsight Compute) not found"


def test_paired_rows_compare_with_the_paired_base_counters(seeded: Engine) -> None:
    fewer = {**BASE_COUNTS, "instructions": 750_000.0}
    with session_scope(seeded) as s:
        f.run_and_upload(s, 0, [_with(f.ok(f.GEMM, f.series_samples(1e-3), binary="g0"), BASE_COUNTS)])
        # the base's own stored counters differ from what the paired job took: the paired job's win
        paired = f.paired_ok(f.GEMM, f.sha(1), f.series_samples(1e-3), f.series_samples(1e-3), binary="g2",
                             base_binary="g1")
        f.run_and_upload(s, 2, [_with(paired, fewer, base={**BASE_COUNTS, "l2_hit_rate": 70.0})])
        kept = s.execute(sa.select(CounterValue.base, CounterValue.commit_id, Series.metric, CounterValue.value)
                         .join(Series, CounterValue.series_id == Series.id)
                         .where(Series.metric == "l2_hit_rate", CounterValue.base.is_(True))).all()
        commit_1 = s.scalar(sa.text("SELECT id FROM commits WHERE sha = :sha"), {"sha": f.sha(1)})
        assert [(b, c, v) for b, c, _, v in kept] == [(True, commit_1, 70.0)]   # filed under the base commit

    row = _rows(seeded, 2)[f.GEMM]
    assert row.paired and row.counters is not None
    assert row.counters.summary == "instructions -25 %, L2 hit rate 70.0 % -> 61.2 %"


def test_an_upload_retried_adds_no_counter(seeded: Engine) -> None:
    from pipeline.results.store import ingest

    with session_scope(seeded) as s:
        run_id, job_id = f.run_and_upload(s, 0, [_with(f.ok(f.GEMM, f.series_samples(1e-3)), BASE_COUNTS)])
        again = f.result_document(run_id=run_id, job_id=job_id, commit_sha=f.sha(0),
                                  results=[_with(f.ok(f.GEMM, f.series_samples(1e-3)), BASE_COUNTS)])
        assert ingest.ingest_result(s, document=again, analysis=AnalysisSettings()).duplicates == 1
        assert s.scalar(sa.select(sa.func.count()).select_from(CounterValue)) == len(BASE_COUNTS)


def test_summary_of_counters() -> None:
    same = counter_changes(BASE_COUNTS, BASE_COUNTS)
    assert counters_summary(same) == "counters unchanged"
    # rates move only beyond their tolerance (a few tenths of a point), counts on any difference
    jitter = counter_changes(BASE_COUNTS, {**BASE_COUNTS, "achieved_occupancy": 48.8, "instructions": 1_000_001.0})
    assert counters_summary(jitter) == "instructions +0.0001 %"
    assert counters_summary(counter_changes(None, BASE_COUNTS)) == "no counters on both sides"
    cpu = counter_changes({"instructions": 200.0}, {"instructions": 230.0})
    assert [c.counter for c in cpu] == ["instructions"] and counters_summary(cpu) == "instructions +15 %"


def test_counter_series_stay_out_of_the_dashboard_and_the_series_list(seeded: Engine) -> None:
    """They hold single values with no change points: the timed series' pages list latency alone."""
    from pipeline.results.store.queries import dashboard, list_series

    with session_scope(seeded) as s:
        f.run_and_upload(s, 0, [_with(f.ok(f.GEMM, f.series_samples(1e-3)), BASE_COUNTS)])
        assert {x.metric for x in list_series(s)} == {"latency"}
        assert [x.metric for x in list_series(s, metric="instructions")] == ["instructions"]
        board = dashboard(s)
        assert {m.metric for g in board.groups for m in g.series} == {"latency"}
        assert sum(board.counts.values()) == 1


def test_counter_history_reads_paired_bases_under_their_commit_and_steps_beyond_tolerance(seeded: Engine) -> None:
    """A paired job's reading of its base binary is one more reading of the base commit; a step is a move
    beyond the counter's tolerance (the L2 hit rate's 8 points exactly: none; occupancy's 0.5 passed: one)."""
    from pipeline.results.store.counters import counter_history

    base_again = {**BASE_COUNTS, "dram_read_bytes": BASE_COUNTS["dram_read_bytes"] + 2000.0}
    head = {**BASE_COUNTS, "instructions": 900_000.0, "l2_hit_rate": BASE_COUNTS["l2_hit_rate"] + 8.0,
            "achieved_occupancy": BASE_COUNTS["achieved_occupancy"] + 0.6}
    with session_scope(seeded) as s:
        f.upload(s, 0, [_with(f.ok(f.GEMM, f.series_samples(1e-3), binary="g0"), BASE_COUNTS)], kind="push")
        paired = f.paired_ok(f.GEMM, f.sha(0), f.series_samples(1e-3), f.series_samples(1e-3), binary="g1",
                             base_binary="g0")
        f.upload(s, 1, [_with(paired, head, base=base_again)], kind="push")
        found = counter_history(s, case_id=f.GEMM, device_class=f.DEVICE_CLASS)
        assert counter_history(s, case_id=f.GEMM, device_class="other-cpu") is None   # never measured there
    assert found is not None
    first, second = found.history
    assert (first.sha, first.readings, second.readings) == (f.sha(0), 2, 1)
    assert first.values["dram_read_bytes"] == BASE_COUNTS["dram_read_bytes"] + 1000.0   # the median of its two
    assert [(s.counter, s.after_sha, s.change) for s in found.steps] == [
        ("instructions", f.sha(1), pytest.approx(-0.1)), ("achieved_occupancy", f.sha(1), pytest.approx(0.6 / 48.5))]
