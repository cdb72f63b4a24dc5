"""Ingestion: commits, runs and jobs, manifests, result documents; refusals leave no trace."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from pipeline.config import AnalysisSettings
from pipeline.contracts.arrays import from_blob
from pipeline.results.store import ingest
from pipeline.results.store.db import session_scope
from pipeline.results.store.ingest import IngestError
from pipeline.results.store.history import update_generations
from pipeline.results.store.models import (
    Bundle,
    Case,
    CaseResultRow,
    Commit,
    CompileStat,
    Device,
    Job,
    Measurement,
    Run,
    Series,
)

from tests.helpers import factories as f


def _run(engine: Engine, label: int = 1, classes: tuple[str, ...] = (f.DEVICE_CLASS,)) -> tuple[str, list[str]]:
    with session_scope(engine) as s:
        run = ingest.create_run(s, repository=f.REPO, commit_sha=f.sha(label), kind="pr", device_classes=classes)
        return run.id, [j.id for j in run.jobs]


# --- commits ---------------------------------------------------------------------------------


def test_record_commits_gives_the_generations_of_the_whole_walk_in_any_order(engine: Engine) -> None:
    """`record_commits` numbers new commits from their parents' generation when it can (no walk over the
    repository) and walks when a stored commit was recorded before its ancestor: either way, after every
    batch, the numbers are those of the full walk (`update_generations` then changes nothing)."""
    chain = [f.commit(f"g{i}", *([f"g{i - 1}"] if i else []), minutes=i) for i in range(12)]
    side = f.commit("side", "g3", minutes=20)
    merge = f.commit("merge", "g7", "side", minutes=21)
    batches = [chain[0:3], [chain[4], chain[3]], [chain[6]], [chain[5], side], [merge, *chain[7:10]], chain[10:]]
    for batch in batches:
        with session_scope(engine) as s:
            ingest.record_commits(s, repository=f.REPO, commits=batch)
            s.flush()
            recorded = {sha: level for sha, level in s.execute(sa.select(Commit.sha, Commit.generation))}
            repository_id = s.scalar(sa.select(Commit.repository_id).limit(1))
            assert repository_id is not None
            update_generations(s, repository_id)
            s.flush()
            assert {sha: level for sha, level in s.execute(sa.select(Commit.sha, Commit.generation))} == recorded
    assert recorded[f.sha("g11")] == 11 and recorded[f.sha("side")] == 4 and recorded[f.sha("merge")] == 8


def test_record_commits_is_idempotent_and_keeps_parent_order(engine: Engine) -> None:
    merge = f.commit("m", "a", "b", "c", branch="main")
    with session_scope(engine) as s:
        ingest.record_commits(s, repository=f.REPO, commits=[f.commit("a"), merge])
    with session_scope(engine) as s:
        ingest.record_commits(s, repository=f.REPO, commits=[merge, f.commit("a")])
    with session_scope(engine) as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Commit)) == 2
        row = s.scalars(sa.select(Commit).where(Commit.sha == f.sha("m"))).one()
        assert [(p.position, p.parent_sha) for p in row.parents] == [(0, f.sha("a")), (1, f.sha("b")), (2, f.sha("c"))]
        assert row.branch == "main" and row.committed_at == merge.committed_at


# --- runs and jobs ---------------------------------------------------------------------------


def test_create_run_makes_one_queued_job_per_device_class(seeded: Engine) -> None:
    run_id, job_ids = _run(seeded, 1, (f.DEVICE_CLASS, "other-cpu"))
    with session_scope(seeded) as s:
        run = s.get(Run, run_id)
        assert run is not None and run.status == "queued" and run.kind == "pr" and run.commit.sha == f.sha(1)
        assert sorted(j.device_class.name for j in run.jobs) == sorted([f.DEVICE_CLASS, "other-cpu"])
        assert {j.status for j in run.jobs} == {"queued"} and len(set(job_ids)) == 2


def test_create_run_of_an_unrecorded_commit_is_refused(seeded: Engine) -> None:
    with pytest.raises(IngestError, match=rf"commit_sha: commit {f.sha(99)} of {f.REPO} is not recorded"):
        with session_scope(seeded) as s:
            ingest.create_run(s, repository=f.REPO, commit_sha=f.sha(99), kind="pr", device_classes=[f.DEVICE_CLASS])
    with pytest.raises(IngestError, match="device_classes.0: unknown device class 'nope'"):
        with session_scope(seeded) as s:
            ingest.create_run(s, repository=f.REPO, commit_sha=f.sha(1), kind="pr", device_classes=["nope"])
    with pytest.raises(IngestError, match="kind: 'weekly'"):
        with session_scope(seeded) as s:
            ingest.create_run(s, repository=f.REPO, commit_sha=f.sha(1), kind="weekly", device_classes=[f.DEVICE_CLASS])


def test_run_status_follows_its_jobs(seeded: Engine) -> None:
    run_id, (a, b) = _run(seeded, 1, (f.DEVICE_CLASS, "other-cpu"))

    def step(job_id: str, status: str, error: str | None = None) -> tuple[str, object, str | None]:
        with session_scope(seeded) as s:
            job = ingest.set_job_status(s, job_id=job_id, status=status, error=error, agent="agent-1")
            return job.run.status, job.run.finished_at, job.run.error

    assert step(a, "running")[0] == "running"
    assert step(a, "done")[0] == "running"
    status, finished, _ = step(b, "running")
    assert status == "running" and finished is None
    status, finished, error = step(b, "failed", "device lost")
    assert status == "failed" and finished is not None and error is not None and "device lost" in error
    assert step(b, "queued")[0] == "running"  # a retry reopens the run
    step(b, "running")
    status, finished, error = step(b, "done")
    assert status == "done" and finished is not None and error is None
    with session_scope(seeded) as s:
        job = s.get(Job, b)
        assert job is not None and job.attempts == 2 and job.agent == "agent-1" and job.finished_at is not None
    with pytest.raises(IngestError, match="job_id: unknown job x"):
        with session_scope(seeded) as s:
            ingest.set_job_status(s, job_id="x", status="done")


# --- manifests -------------------------------------------------------------------------------


def test_manifest_registers_cases_and_compile_stats_idempotently(seeded: Engine) -> None:
    m = f.manifest(f.sha(1), [f.built_entry(f.GEMM, model="resnet"), f.failed_entry("attn/x/1x2/bf16/triton")])
    with session_scope(seeded) as s:
        digest = ingest.ingest_manifest(s, manifest=m, path="/bundles/1")
    with session_scope(seeded) as s:
        assert ingest.ingest_manifest(s, manifest=m, path="/bundles/1") == digest
        (bundle,) = s.scalars(sa.select(Bundle).where(Bundle.path == "/bundles/1")).all()   # registered once
        first = bundle.id
        assert bundle.digest == digest == ingest.bundle_digest(m) and len(bundle.digest) == 64
        attn = s.scalars(sa.select(Case).where(Case.case_id == "attn/x/1x2/bf16/triton")).one()
        assert (attn.family, attn.name, attn.shape, attn.dtype, attn.impl) == ("attn", "x", "1x2", "bf16", "triton")
        assert s.scalar(sa.select(Case.model).where(Case.case_id == f.GEMM)) == "resnet"
        stats = s.scalars(sa.select(CompileStat).where(CompileStat.bundle_id == first).order_by(CompileStat.status)).all()
        assert [(c.status, c.compile_time_s, c.binary_bytes, c.spills, c.registers) for c in stats] == [
            ("built", 1.5, 4096, 0, None), ("failed", None, None, None, None)]
        assert stats[1].error == "iree-compile: boom"
        assert s.scalar(sa.select(sa.func.count()).select_from(Bundle)) == 2


def test_manifest_of_an_unrecorded_commit_is_refused(seeded: Engine) -> None:
    with pytest.raises(IngestError, match=f"commit: commit {f.sha(42)}"), session_scope(seeded) as s:
        ingest.ingest_manifest(s, manifest=f.manifest(f.sha(42), [f.built_entry(f.GEMM)]), path="/b")


# --- results ---------------------------------------------------------------------------------


def test_valid_document_is_stored_with_every_sample(seeded: Engine) -> None:
    run_id, (job_id,) = _run(seeded)
    samples = f.series_samples(1e-3, n=7)
    clocks = [1800.0 + i for i in range(7)]
    doc = f.result_document(run_id=run_id, job_id=job_id, commit_sha=f.sha(1), results=[
        f.ok(f.GEMM, samples, clocks=clocks), f.failed(f.CONV, "wrong")])
    with session_scope(seeded) as s:
        summary = ingest.ingest_result(s, document=doc, analysis=AnalysisSettings())
    assert (summary.stored, summary.duplicates, summary.samples) == (2, 0, 7)
    with session_scope(seeded) as s:
        results = {r.status: r for r in s.scalars(sa.select(CaseResultRow))}
        assert set(results) == {"ok", "wrong"}
        assert results["wrong"].reason == "wrong on purpose" and results["wrong"].max_abs_error == 3.0
        m = s.scalars(sa.select(Measurement)).one()
        assert m.case_result_id == results["ok"].id and m.n == 7
        assert m.median == pytest.approx(1e-3) and m.min == pytest.approx(samples[0])
        series = s.get(Series, m.series_id)
        assert series is not None and series.metric == "latency"
        stored, stored_clocks = s.execute(sa.select(Measurement.samples, Measurement.sample_clocks)
                                          .where(Measurement.id == m.id)).one()
        assert from_blob(stored) == samples  # every sample, in order, exactly
        assert from_blob(stored_clocks) == pytest.approx(clocks)
        device = s.scalars(sa.select(Device)).one()
        assert device.uid == "host-1" and results["ok"].device_id == device.id


def test_duplicate_upload_is_an_idempotent_success(seeded: Engine) -> None:
    run_id, (job_id,) = _run(seeded)
    first = f.result_document(run_id=run_id, job_id=job_id, commit_sha=f.sha(1),
                              results=[f.ok(f.GEMM, f.series_samples(1e-3))])
    both = f.result_document(run_id=run_id, job_id=job_id, commit_sha=f.sha(1),
                             results=[f.ok(f.GEMM, f.series_samples(2e-3)), f.ok(f.CONV, f.series_samples(1e-3, n=4))])
    with session_scope(seeded) as s:
        assert ingest.ingest_result(s, document=first, analysis=AnalysisSettings()).stored == 1
    with session_scope(seeded) as s:
        summary = ingest.ingest_result(s, document=first, analysis=AnalysisSettings())
    assert (summary.stored, summary.duplicates, summary.samples) == (0, 1, 0)
    with session_scope(seeded) as s:
        summary = ingest.ingest_result(s, document=both, analysis=AnalysisSettings())
    assert (summary.stored, summary.duplicates, summary.samples) == (1, 1, 4)
    with session_scope(seeded) as s:
        counts = f.row_counts(s)
        assert (counts["case_results"], counts["measurements"], f.sample_count(s)) == (2, 2, 14)
        # the duplicate kept the first upload's samples
        gemm_median = s.scalar(sa.select(Measurement.median).join(Series).join(Case).where(Case.case_id == f.GEMM))
        assert gemm_median == pytest.approx(1e-3)


def test_a_second_job_of_the_same_commit_adds_a_measurement(seeded: Engine) -> None:
    for _ in range(2):
        run_id, (job_id,) = _run(seeded)
        with session_scope(seeded) as s:
            ingest.ingest_result(s, document=f.result_document(
                run_id=run_id, job_id=job_id, commit_sha=f.sha(1), results=[f.ok(f.GEMM, f.series_samples(1e-3))]),
                analysis=AnalysisSettings())
    with session_scope(seeded) as s:
        assert f.row_counts(s)["measurements"] == 2 and f.row_counts(s)["series"] == 1


@pytest.mark.parametrize("problem, message", [
    ("unknown case", r"results\.1\.case: unknown case gemm/unknown/1x1x1/f32/iree"),
    ("unknown job", r"job_id: unknown job no-such-job"),
    ("wrong commit", rf"commit: run \S+ is of commit {f.sha(1)}, not {f.sha(2)}"),
    ("job of another run", r"run_id: job \S+ belongs to run \S+, not \S+"),
    ("wrong device class", r"device.device_class: job \S+ runs on cpu-x86-64, not other-cpu"),
])
def test_refused_document_leaves_the_store_exactly_as_it_was(seeded: Engine, problem: str, message: str) -> None:
    run_id, (job_id,) = _run(seeded)
    other_run, _ = _run(seeded)
    # something already stored, so "unchanged" is checked against a non-empty store
    with session_scope(seeded) as s:
        ingest.ingest_result(s, document=f.result_document(
            run_id=run_id, job_id=job_id, commit_sha=f.sha(1), results=[f.ok(f.CONV, f.series_samples(1e-3))]),
            analysis=AnalysisSettings())
    results = [f.ok(f.GEMM, f.series_samples(1e-3))]
    kwargs = dict(run_id=run_id, job_id=job_id, commit_sha=f.sha(1))
    if problem == "unknown case":
        results.append(f.ok("gemm/unknown/1x1x1/f32/iree", f.series_samples(1e-3)))
    elif problem == "unknown job":
        kwargs["job_id"] = "no-such-job"
    elif problem == "wrong commit":
        kwargs["commit_sha"] = f.sha(2)
    elif problem == "job of another run":
        kwargs["run_id"] = other_run
    document = f.result_document(results=results, uid="host-2",
                                 device_class="other-cpu" if problem == "wrong device class" else f.DEVICE_CLASS,
                                 **kwargs)
    with session_scope(seeded) as s:
        before, counts_before = f.snapshot(s), f.row_counts(s)
    with pytest.raises(IngestError, match=message), session_scope(seeded) as s:
        ingest.ingest_result(s, document=document, analysis=AnalysisSettings())
    with session_scope(seeded) as s:
        assert f.row_counts(s) == counts_before
        assert f.snapshot(s) == before


def test_failure_after_writes_rolls_everything_back(seeded: Engine) -> None:
    """Ingest succeeded inside the block, then the caller failed: nothing of it stays."""
    run_id, (job_id,) = _run(seeded)
    with session_scope(seeded) as s:
        before = f.snapshot(s)
    with pytest.raises(RuntimeError), session_scope(seeded) as s:
        summary = ingest.ingest_result(s, document=f.result_document(
            run_id=run_id, job_id=job_id, commit_sha=f.sha(1), results=[f.ok(f.GEMM, f.series_samples(1e-3))]),
            analysis=AnalysisSettings())
        assert summary.samples == 10 and f.sample_count(s) == 10
        raise RuntimeError("the caller's next step failed")
    with session_scope(seeded) as s:
        assert f.snapshot(s) == before


def test_the_environment_of_each_result_and_of_the_job_is_kept(seeded: Engine) -> None:
    from pipeline.results.store.queries import job_results

    run_id, (job_id,) = _run(seeded)
    paired = f.ok(f.GEMM, f.series_samples(1e-3)).model_copy(update={"environment": {
        "input_seed": "11", "paired_base": "the head's own graphs"}})
    doc = f.result_document(run_id=run_id, job_id=job_id, commit_sha=f.sha(1),
                            results=[paired, f.failed(f.CONV, "wrong")]).model_copy(
        update={"environment": {"host": "bench-1", "checks_run": "2"}})
    with session_scope(seeded) as s:
        ingest.ingest_result(s, document=doc, analysis=AnalysisSettings())
    with session_scope(seeded) as s:
        found = job_results(s, job_id)
        assert found is not None and found.environment == {"host": "bench-1", "checks_run": "2"}
        results = {str(r.case_id): r for r in found.results}
        assert results[f.GEMM].environment == {"input_seed": "11", "paired_base": "the head's own graphs"}
        assert results[f.GEMM].median == pytest.approx(1e-3, rel=0.1) and results[f.GEMM].n == 10
        assert results[f.CONV].environment == {} and results[f.CONV].median is None
        assert results[f.CONV].reason == "wrong on purpose" and results[f.CONV].max_abs_error == 3.0
        assert job_results(s, "no-such-job") is None
