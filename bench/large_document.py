"""One full-suite paired result document into the store (issue 12): its size on the wire and the
time to parse and ingest it, on SQLite and PostgreSQL.

Shape: `--cases` ok cases (default 164, the CUDA bundle) x `--samples` head samples each (default
15,245: 2.5 million in all), each paired with as many base samples, with an SM clock and a
temperature per sample. Samples look like CUDA event timings (float32 milliseconds, ~1 % noise).

Timed apart, each on a fresh database:
- serialise: `ResultDocument.model_dump_json()` (what the agent sends);
- parse: `parse_result(body)` (the service's validation);
- ingest: `ingest.ingest_result` in one transaction, committed (analysis off: a PR job's
  upload does not analyse the history).
The script only uses APIs that exist before and after the compact storage change, so the same
file measures an older checkout (run it from that checkout's root).

    python bench/large_document.py --sqlite /tmp/large.db --pg-url postgresql://root@127.0.0.1:5432/benchfarm_large
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path.cwd()))

from pipeline.contracts import (  # noqa: E402
    BundleEntry, BundleManifest, CaseResult, CommitInfo, CompileStats, Correctness, DeviceClass, DeviceInfo,
    LaunchSpec, ResultDocument, TensorSpec, parse_result,
)
from pipeline.contracts.manifest import ArtifactRef, ReferenceSpec  # noqa: E402
from pipeline.contracts.result import AgentInfo, PairedBase  # noqa: E402
from pipeline.results.store import ingest  # noqa: E402
from pipeline.results.store.db import open_store, session_scope  # noqa: E402
from pipeline.results.analysis.stats import summarize  # noqa: E402

REPO = "bench/large"
TARGET = "cuda:sm_90"
DEVICE_CLASS = "nvidia-h200"
HEAD, BASE = "1" * 40, "0" * 40
T0 = datetime(2026, 11, 24, tzinfo=UTC)


def case_id(i: int) -> str:
    return f"gemm/suite-{i:03d}/4096x4096x4096/bf16/triton"


def document(cases: int, samples: int, seed: int, *, run_id: str, job_id: str) -> ResultDocument:
    rng = np.random.default_rng(seed)
    correctness = Correctness(passed=True, max_abs_error=1e-3, max_rel_error=1e-3, atol=1e-2, rtol=1e-2)
    results = []
    for i in range(cases):
        def timings() -> list[float]:
            ms = rng.lognormal(np.log(0.05 + i * 1e-4), 0.01, samples).astype(np.float32)
            return (ms.astype(np.float64) * 1e-3).tolist()

        head = timings()
        results.append(CaseResult(
            case=case_id(i), target=TARGET, status="ok", samples=head, stats=summarize(head), correctness=correctness,
            sample_clocks_mhz=rng.choice([1980.0, 1965.0, 1950.0], samples).tolist(),
            sample_temperatures_c=rng.choice([55.0, 56.0, 57.0], samples).tolist(),
            paired_base=PairedBase(commit=BASE, samples=timings())))
    return ResultDocument(
        run_id=run_id, job_id=job_id, repository=REPO, commit=HEAD,
        device=DeviceInfo(device_class=DEVICE_CLASS, uid="GPU-bench", name="H200", host="bench", driver="580"),
        agent=AgentInfo(name="agent-bench", version="0"), started_at=T0, finished_at=T0 + timedelta(minutes=5),
        results=results)


def manifest(commit: str, cases: int) -> BundleManifest:
    entries = [BundleEntry(
        case=case_id(i), target=TARGET, status="built",
        artifact=ArtifactRef(path=f"artifacts/{i}.cubin", sha256="c" * 64, size_bytes=1000),
        launch=LaunchSpec(entry_point="main", arguments=["a", "b"], results=["c"]),
        tensors=[TensorSpec(name=n, role="output" if n == "c" else "input", shape=[64, 64], dtype="f32")
                 for n in "abc"],
        reference=ReferenceSpec(module="gemm.reference", function="matmul", atol=1e-2, rtol=1e-2),
        flops=2 * 64**3, bytes=3 * 4 * 64**2,
        compile=CompileStats(compiler="triton", compiler_version="3.9.0", compile_time_s=1.0, binary_bytes=4096,
                             registers=None, spills=0, shared_bytes=None)) for i in range(cases)]
    return BundleManifest(repository=REPO, commit=commit, suite_path="kernels", suite_digest="d" * 40, created_at=T0,
                          compilers={"triton": "3.9.0"}, targets=[TARGET], entries=entries)


def prepare(url: str, cases: int) -> tuple[sa.Engine, str, str]:
    engine = open_store(url)
    with session_scope(engine) as s:
        ingest.record_commits(s, repository=REPO, commits=[
            CommitInfo(sha=BASE, committed_at=T0), CommitInfo(sha=HEAD, parents=[BASE], committed_at=T0)])
        ingest.upsert_device_class(s, DeviceClass(name=DEVICE_CLASS, kind="gpu", targets=[TARGET], runtime="cuda"))
        for commit in (BASE, HEAD):
            ingest.ingest_manifest(s, manifest=manifest(commit, cases), path=f"/bundles/{commit[:4]}")
        run = ingest.create_run(s, repository=REPO, commit_sha=HEAD, kind="pr", device_classes=[DEVICE_CLASS])
        return engine, run.id, run.jobs[0].id


def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    engine, run_id, job_id = prepare(url, args.cases)
    t = time.perf_counter()
    doc = document(args.cases, args.samples, args.seed, run_id=run_id, job_id=job_id)
    built = time.perf_counter() - t
    t = time.perf_counter()
    body = doc.model_dump_json().encode()
    serialise = time.perf_counter() - t
    del doc
    t = time.perf_counter()
    parsed = parse_result(body)
    parse = time.perf_counter() - t
    t = time.perf_counter()
    with session_scope(engine) as s:
        summary = ingest.ingest_result(s, document=parsed, analysis=None)
    seconds = time.perf_counter() - t
    engine.dispose()
    return {"build_s": round(built, 2), "body_mib": round(len(body) / 2**20, 1), "serialise_s": round(serialise, 2),
            "parse_s": round(parse, 2), "ingest_s": round(seconds, 2), "samples": summary.samples,
            "samples_per_s": round(summary.samples / seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=164)
    parser.add_argument("--samples", type=int, default=15_245, help="head samples per case")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--sqlite", type=Path, help="a SQLite file to create (removed first)")
    parser.add_argument("--pg-url", help="a PostgreSQL database to create (dropped at the end)")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    report: dict[str, Any] = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "commit": commit,
                              "machine": f"{platform.node()} {os.cpu_count()} cores, load {os.getloadavg()}",
                              "cases": args.cases, "head_samples": args.cases * args.samples}
    if args.sqlite:
        args.sqlite.unlink(missing_ok=True)
        report["sqlite"] = measure(f"sqlite:///{args.sqlite}", args)
        print(json.dumps(report["sqlite"]), file=sys.stderr)
    if args.pg_url:
        url = make_url(args.pg_url)
        admin = url.set(database="test").render_as_string(hide_password=False).replace("+psycopg", "")
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{url.database}"')
            c.execute(f'CREATE DATABASE "{url.database}"')
        try:
            report["postgresql"] = measure(args.pg_url, args)
        finally:
            with psycopg.connect(admin, autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)')
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
