"""The pages' comparison cache: kept while what it read is unchanged, recomputed when the head,
the base or the base choice moves; warmed when a job ends, and on start for the dashboard's newest
runs (both stores, real ingest)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import Engine

from pipeline.config import AnalysisSettings
from pipeline.config import Settings
from pipeline.service.web.verdicts import (
    NEWEST_RUNS,
    VerdictWarmer,
    cached_comparison,
    cached_verdict,
    kept_comparison,
)
from pipeline.results.store import ingest
from pipeline.results.store.compare import ComparisonOut
from pipeline.results.store.db import session_scope
from pipeline.results.store.models import Job, Run
from tests.helpers import factories as f
from tests.helpers.stores import blank_engine, database_url, engine, seeded, store_url  # noqa: F401  (fixtures)


def _table(store: Engine, settings: Settings, head: str | int = 3) -> ComparisonOut:
    with session_scope(store) as s:
        (table,) = cached_verdict(s, settings, f.REPO, f.sha(head), None, None, None).comparisons
    return table


def test_kept_across_unrelated_results_recomputed_when_head_base_or_base_choice_moves(
        seeded: Engine, tmp_path: Path) -> None:  # noqa: F811
    settings = Settings(home=tmp_path)
    with session_scope(seeded) as s:
        ingest.record_commits(s, repository=f.REPO, commits=[f.commit("elsewhere", 0, minutes=9)])
        f.run_and_upload(s, 0, [f.ok(f.GEMM, f.series_samples(1e-3))])
        f.run_and_upload(s, 3, [f.ok(f.GEMM, f.series_samples(1.2e-3))])
    first = _table(seeded, settings)
    assert first.base_sha == f.sha(0) and [r.status for r in first.rows] == ["regressed"]
    assert _table(seeded, settings) is first  # the same store: the kept one

    with session_scope(seeded) as s:  # results for a commit off the head's ancestry: nothing it read
        f.run_and_upload(s, "elsewhere", [f.ok(f.GEMM, f.series_samples(5e-3))])
        f.run_and_upload(s, "elsewhere", [f.ok(f.CONV, f.series_samples(5e-3))], device_class="other-cpu")
    assert _table(seeded, settings) is first

    with session_scope(seeded) as s:  # the head gets a newer result: back to the base's level
        f.run_and_upload(s, 3, [f.ok(f.GEMM, f.series_samples(1e-3))])
    again = _table(seeded, settings)
    assert again is not first and [r.status for r in again.rows] == ["similar"]

    with session_scope(seeded) as s:  # a nearer ancestor gets results: it becomes the base
        f.run_and_upload(s, 2, [f.ok(f.GEMM, f.series_samples(0.5e-3))])
    nearer = _table(seeded, settings)
    assert nearer.base_sha == f.sha(2) and [r.status for r in nearer.rows] == ["regressed"]

    with session_scope(seeded) as s:  # the base itself gets a newer result
        f.run_and_upload(s, 2, [f.ok(f.GEMM, f.series_samples(1e-3))])
    rebased = _table(seeded, settings)
    assert rebased is not nearer and [r.status for r in rebased.rows] == ["similar"]

    with session_scope(seeded) as s:  # the head's first result on another device class: a new table
        f.run_and_upload(s, 3, [f.ok(f.GEMM, f.series_samples(1e-3))], device_class="other-cpu")
        both = cached_verdict(s, settings, f.REPO, f.sha(3), None, None, None)
    assert [c.device_class for c in both.comparisons] == ["cpu-x86-64", "other-cpu"]
    assert both.comparisons[0] is rebased  # the class that did not change is still the kept one


def test_the_warmer_keeps_the_comparison_of_each_job_that_ends(seeded: Engine, tmp_path: Path) -> None:  # noqa: F811
    settings = Settings(home=tmp_path)
    with session_scope(seeded) as s:   # jobs that ended before the warmer started
        old_run, old_job = f.run_and_upload(s, 0, [f.ok(f.GEMM, f.series_samples(1e-3))])
        ingest.set_job_status(s, job_id=old_job, status="done", agent="agent-1")
        s.execute(sa.update(Run).where(Run.id == old_run).values(created_at=datetime(2026, 1, 1)))
        s.execute(sa.update(Job).where(Job.id == old_job).values(finished_at=datetime(2026, 1, 1)))
        for _ in range(NEWEST_RUNS):   # the dashboard's newest runs: the old one is not among them
            _, job = f.run_and_upload(s, 1, [f.ok(f.GEMM, f.series_samples(1e-3))])
            ingest.set_job_status(s, job_id=job, status="done", agent="agent-1")
    warmer = VerdictWarmer(settings, seeded)
    assert warmer.step() and not warmer.step()   # the newest runs' comparisons, for the dashboard's verdicts
    with session_scope(seeded) as s:
        assert kept_comparison(s, settings, f.REPO, f.sha(1), None, f.DEVICE_CLASS, None) is not None
        assert kept_comparison(s, settings, f.REPO, f.sha(0), None, f.DEVICE_CLASS, None) is None
        run = ingest.create_run(s, repository=f.REPO, commit_sha=f.sha(3), kind="push",
                                device_classes=[f.DEVICE_CLASS])
        job_id = run.jobs[0].id
        ingest.ingest_result(s, document=f.result_document(
            run_id=run.id, job_id=job_id, commit_sha=f.sha(3), results=[f.ok(f.GEMM, f.series_samples(1.2e-3))]),
            analysis=AnalysisSettings())
    assert not warmer.step()  # results stored, the job not ended yet
    with session_scope(seeded) as s:
        ingest.set_job_status(s, job_id=job_id, status="done", agent="agent-1")
        assert kept_comparison(s, settings, f.REPO, f.sha(3), None, f.DEVICE_CLASS, None) is None
    assert warmer.step() and not warmer.step()  # once per ended job
    with session_scope(seeded) as s:
        warmed = kept_comparison(s, settings, f.REPO, f.sha(3), None, f.DEVICE_CLASS, None)
        assert warmed is not None and [r.status for r in warmed.rows] == ["regressed"]
        assert cached_comparison(s, settings, f.REPO, f.sha(3), None, f.DEVICE_CLASS, None) is warmed
