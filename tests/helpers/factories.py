"""Builders of valid contract documents for the store's tests (pydantic models, not raw dicts)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.config import AnalysisSettings
from pipeline.results.analysis.stats import summarize
from pipeline.contracts import (
    BundleEntry,
    BundleManifest,
    CaseResult,
    CommitInfo,
    CompileStats,
    Correctness,
    DeviceClass,
    DeviceInfo,
    LaunchSpec,
    ResultDocument,
    TensorSpec,
)
from pipeline.contracts.manifest import ArtifactRef, ReferenceSpec
from pipeline.contracts.result import AgentInfo
from pipeline.results.store.models import Base

REPO = "bench/kernels"
TARGET = "llvm-cpu:x86_64"
DEVICE_CLASS = "cpu-x86-64"
GEMM = "gemm/square-256/256x256x256/f32/iree"
CONV = "conv/resnet-3x3/1x64x56x56/f32/iree"
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def sha(label: str | int) -> str:
    return hashlib.sha1(str(label).encode()).hexdigest()


def commit(label: str | int, *parents: str | int, minutes: int = 0, **fields: Any) -> CommitInfo:
    return CommitInfo(sha=sha(label), parents=[sha(p) for p in parents], message=f"commit {label}",
                      author="dev <dev@example.com>", committed_at=T0 + timedelta(minutes=minutes), **fields)


def device_class(name: str = DEVICE_CLASS) -> DeviceClass:
    return DeviceClass(name=name, kind="cpu", targets=[TARGET], runtime="iree", hal_driver="local-sync",
                       description="x86-64 host CPU")


def built_entry(case: str, target: str = TARGET, model: str = "") -> BundleEntry:
    return BundleEntry(
        case=case, target=target, model=model, status="built",
        artifact=ArtifactRef(path=f"artifacts/{hashlib.sha1(case.encode()).hexdigest()}.vmfb", sha256="c" * 64,
                             size_bytes=1000),
        launch=LaunchSpec(entry_point="main", arguments=["a", "b"], results=["c"]),
        tensors=[TensorSpec(name="a", role="input", shape=[256, 256], dtype="f32"),
                 TensorSpec(name="b", role="input", shape=[256, 256], dtype="f32"),
                 TensorSpec(name="c", role="output", shape=[256, 256], dtype="f32")],
        reference=ReferenceSpec(module="gemm.reference", function="matmul", atol=1e-3, rtol=1e-3),
        flops=2 * 256**3, bytes=3 * 4 * 256**2,
        compile=CompileStats(compiler="iree-compile", compiler_version="3.13.0", compile_time_s=1.5,
                             binary_bytes=4096, registers=None, spills=0, shared_bytes=None),
    )


def failed_entry(case: str, target: str = TARGET) -> BundleEntry:
    return BundleEntry(case=case, target=target, status="failed", error="iree-compile: boom", flops=1, bytes=1)


def manifest(commit_sha: str, entries: Sequence[BundleEntry], repository: str = REPO,
             suite_digest: str = "d" * 40) -> BundleManifest:
    return BundleManifest(
        repository=repository, commit=commit_sha, suite_path="kernels", suite_digest=suite_digest,
        created_at=T0, compilers={"iree": "3.13.0"}, targets=sorted({e.target for e in entries}),
        entries=list(entries),
    )


def digest(label: str | int) -> str:
    """A binary digest (`CaseResult.binary_digest`) named by a label: equal labels, identical code."""
    return hashlib.sha256(str(label).encode()).hexdigest()


def ok(case: str, samples: Sequence[float], target: str = TARGET, clocks: Sequence[float] | None = None, *,
       rounds: Sequence[int] | None = None, binary: str | int | None = None) -> CaseResult:
    return CaseResult(
        case=case, target=target, status="ok", samples=list(samples),
        sample_clocks_mhz=list(clocks) if clocks is not None else None, stats=summarize(samples),
        correctness=Correctness(passed=True, max_abs_error=1e-6, max_rel_error=1e-5, atol=1e-3, rtol=1e-3),
        rounds=list(rounds) if rounds is not None else None, binary_digest=digest(binary) if binary is not None else None,
    )


def failed(case: str, status: str = "wrong", target: str = TARGET, *, reason: str | None = None,
           binary: str | int | None = None) -> CaseResult:
    correctness = None
    if status == "wrong":
        correctness = Correctness(passed=False, max_abs_error=3.0, max_rel_error=0.5, atol=1e-3, rtol=1e-3)
    return CaseResult(case=case, target=target, status=status, reason=reason or f"{status} on purpose",
                      correctness=correctness, binary_digest=digest(binary) if binary is not None else None)


def result_document(*, run_id: str, job_id: str, commit_sha: str, results: Sequence[CaseResult],
                    device_class: str = DEVICE_CLASS, repository: str = REPO, uid: str = "host-1") -> ResultDocument:
    return ResultDocument(
        run_id=run_id, job_id=job_id, repository=repository, commit=commit_sha,
        device=DeviceInfo(device_class=device_class, uid=uid, name="Test CPU", host="bench-1", driver="local-sync"),
        agent=AgentInfo(name="agent-1", version="0.1.0"),
        started_at=T0, finished_at=T0 + timedelta(seconds=30), results=list(results),
    )


def series_samples(center: float, n: int = 10, spread: float = 0.01) -> list[float]:
    """n distinct positive samples evenly spread +-spread (relative) around center."""
    return [center * (1 - spread + 2 * spread * i / (n - 1)) for i in range(n)]


def snapshot(session: Session) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in a stable order: two equal snapshots mean an unchanged store."""
    out = {}
    for table in Base.metadata.sorted_tables:
        rows = session.execute(sa.select(table).order_by(*table.primary_key.columns)).all()
        out[table.name] = [tuple(row) for row in rows]
    return out


def row_counts(session: Session) -> dict[str, int]:
    return {t.name: session.scalar(sa.select(sa.func.count()).select_from(t)) or 0
            for t in Base.metadata.sorted_tables}


def sample_count(session: Session) -> int:
    """How many samples the store holds (each measurement keeps its samples as one float64 array)."""
    from pipeline.results.store.models import Measurement

    return int(session.execute(sa.select(sa.func.coalesce(sa.func.sum(sa.func.length(Measurement.samples)), 0)))
               .scalar_one()) // 8


def stored_samples(session: Session) -> list[float]:
    """Every sample of every measurement, measurement by measurement."""
    from pipeline.contracts.arrays import from_blob
    from pipeline.results.store.models import Measurement

    return [v for blob in session.scalars(sa.select(Measurement.samples).order_by(Measurement.id)) for v in from_blob(blob)]


def run_and_upload(session: Session, label: str | int, results: Sequence[CaseResult],
                   device_class: str = DEVICE_CLASS) -> tuple[str, str]:
    """Create a run of commit `label` on one device class and upload `results` for its job;
    returns (run id, job id)."""
    from pipeline.results.store import ingest

    run = ingest.create_run(session, repository=REPO, commit_sha=sha(label), kind="adhoc",
                            device_classes=[device_class])
    job_id = run.jobs[0].id
    ingest.ingest_result(session, document=result_document(
        run_id=run.id, job_id=job_id, commit_sha=sha(label), results=results, device_class=device_class),
        analysis=AnalysisSettings())
    return run.id, job_id


def paired_ok(case: str, base_commit: str, base: Sequence[float], head: Sequence[float],
              target: str = TARGET, *, rounds: Sequence[int] | None = None, binary: str | int | None = None,
              base_binary: str | int | None = None) -> CaseResult:
    """An ok result of `head` samples timed interleaved with `base` samples of `base_commit`."""
    from pipeline.contracts.result import PairedBase

    paired = PairedBase(commit=base_commit, samples=list(base),
                        binary_digest=digest(base_binary) if base_binary is not None else None)
    return CaseResult.model_validate({**ok(case, head, target=target, rounds=rounds, binary=binary).model_dump(),
                                      "paired_base": paired.model_dump()})


def upload(session: Session, label: str | int, results: Sequence[CaseResult], *, device_class: str = DEVICE_CLASS,
           kind: str = "adhoc", analysis: Any = "default") -> tuple[str, str]:
    """`run_and_upload` with the run kind and the analysis settings (None: no analysis) chosen."""
    from pipeline.results.store import ingest

    run = ingest.create_run(session, repository=REPO, commit_sha=sha(label), kind=kind, device_classes=[device_class])
    job_id = run.jobs[0].id
    document = result_document(run_id=run.id, job_id=job_id, commit_sha=sha(label), results=results,
                               device_class=device_class)
    if analysis == "default":
        ingest.ingest_result(session, document=document, analysis=AnalysisSettings())
    else:
        ingest.ingest_result(session, document=document, analysis=analysis)
    return run.id, job_id
