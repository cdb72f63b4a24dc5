"""The pages' comparison cache: kept while what it read is unchanged, recomputed when the head,
the base or the base choice moves (both stores, real ingest)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

from pipeline.config import Settings
from pipeline.results import ingest
from pipeline.results.db import session_scope
from pipeline.results.web.verdicts import cached_verdict
from tests.results import factories as f
from tests.results.conftest import blank_engine, database_url, engine, seeded  # noqa: F401  (fixtures)


def _verdict(store: Engine, settings: Settings, head: str | int = 3):
    with session_scope(store) as s:
        return cached_verdict(s, settings, f.REPO, f.sha(head), None, None, None)


def test_kept_across_unrelated_results_recomputed_when_head_base_or_base_choice_moves(
        seeded: Engine, tmp_path: Path) -> None:  # noqa: F811
    settings = Settings(home=tmp_path)
    with session_scope(seeded) as s:
        ingest.record_commits(s, repository=f.REPO, commits=[f.commit("elsewhere", 0, minutes=9)])
        f.run_and_upload(s, 0, [f.ok(f.GEMM, f.series_samples(1e-3))])
        f.run_and_upload(s, 3, [f.ok(f.GEMM, f.series_samples(1.2e-3))])
    first = _verdict(seeded, settings)
    (table,) = first.comparisons
    assert table.base_sha == f.sha(0) and [r.status for r in table.rows] == ["regressed"]
    assert _verdict(seeded, settings) is first  # the same store: the kept one

    with session_scope(seeded) as s:  # results for a commit off the head's ancestry: nothing it read
        f.run_and_upload(s, "elsewhere", [f.ok(f.GEMM, f.series_samples(5e-3))])
        f.run_and_upload(s, "elsewhere", [f.ok(f.CONV, f.series_samples(5e-3))], device_class="other-cpu")
    assert _verdict(seeded, settings) is first

    with session_scope(seeded) as s:  # the head gets a newer result: back to the base's level
        f.run_and_upload(s, 3, [f.ok(f.GEMM, f.series_samples(1e-3))])
    again = _verdict(seeded, settings)
    assert again is not first and [r.status for r in again.comparisons[0].rows] == ["similar"]

    with session_scope(seeded) as s:  # a nearer ancestor gets results: it becomes the base
        f.run_and_upload(s, 2, [f.ok(f.GEMM, f.series_samples(0.5e-3))])
    nearer = _verdict(seeded, settings)
    assert nearer.comparisons[0].base_sha == f.sha(2)
    assert [r.status for r in nearer.comparisons[0].rows] == ["regressed"]

    with session_scope(seeded) as s:  # the base itself gets a newer result
        f.run_and_upload(s, 2, [f.ok(f.GEMM, f.series_samples(1e-3))])
    rebased = _verdict(seeded, settings)
    assert rebased is not nearer and [r.status for r in rebased.comparisons[0].rows] == ["similar"]

    with session_scope(seeded) as s:  # the head's first result on another device class: a new table
        f.run_and_upload(s, 3, [f.ok(f.GEMM, f.series_samples(1e-3))], device_class="other-cpu")
    assert [c.device_class for c in _verdict(seeded, settings).comparisons] == ["cpu-x86-64", "other-cpu"]
