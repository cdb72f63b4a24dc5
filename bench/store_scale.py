"""The results store at scale on PostgreSQL (issue 4, deliverable 4): ingest rate, series-history
and dashboard latency, full re-analysis time, on a synthetic default-branch history.

Shape: `--cases` x `--device-classes` x `--commits` x `--samples` (goal: 2,000 x 10 x 500 x 10 =
100M samples). Every commit of one linear default branch (`main`) gets a push run with one job
per device class; each job's result document holds every case (ok, `--samples` samples with
their clocks). About 10 % of the series take a step of 5-15 % at a random commit, so the
re-analysis has change points to find and the dashboard has states to count.

Targets: ingest >= 50,000 samples/s; series history p95 <= 100 ms; dashboard p95 <= 300 ms.

Phases, each timed on its own:
1. setup: repository, commits, device classes, one bundle manifest registering every case,
   one push run per commit (the dispatcher's part, not the agents');
2. load: `ingest.ingest_result` with real `ResultDocument`s, `--batch` documents per
   transaction as POST /results/batch does (minus HTTP and JSON parsing, which the bench times
   apart on one batch), analysis off (analysis=None), every commit but the newest
   `--analysed-commits`. Documents are built (pydantic validation included) outside the timed calls;
3. re-analysis: `analysis.reanalyze_all` on the whole store (or `--reanalyze-series` of them,
   extrapolated), in one transaction, committed: the change points it finds are what the
   dashboard then counts, and every series' tail is stored (a rerun on a kept store redoes the
   detection and stores nothing new);
3b. analysed uploads: the newest `--analysed-commits` commits, one job per device class, each
   uploaded as a push with the service's default analysis (what the service runs after an upload),
   the ingest and `analyze_after_ingest` timed apart per upload (issue 31: <= 1 s of analysis per
   2,000-case upload at 500 and at 5,000 commits of history); `--check` then compares every
   series' standing change points with a batch analysis of its whole history;
4. queries, on the analysed store: `queries.series_history` on `--history-queries` random
   series, `queries.dashboard` `--dashboard-runs` times (after one warm-up each), each call in
   its own session.

The database named in `--url` is created when missing and dropped at the end, unless `--keep`
(or `--skip-load`, which measures an existing store loaded by an earlier `--keep` run).

    python bench/store_scale.py --cases 200 --device-classes 5 --commits 1000 --samples 10 --out results.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.results.analysis.stats import summarize
from pipeline.config import AnalysisSettings
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
from pipeline.service.api.routes.results import parse_batch
from pipeline.service.app import freeze_startup_heap
from pipeline.results.store import analysis, ingest, queries
from pipeline.results.store.db import make_engine, open_store, session_scope
from pipeline.results.store.models import ChangePoint, Commit, DeviceClassRow, Job, Measurement, Run, Series

REPO = "scale/kernels"
TARGET = "llvm-cpu:x86_64"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
TARGETS = {"ingest_samples_per_s": 50_000, "series_history_p95_ms": 100, "dashboard_p95_ms": 300}
FAMILIES = ("gemm", "conv", "attention", "gather", "scatter", "softmax", "layernorm", "reduce")


# --- the synthetic history -------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    cases: int
    device_classes: int
    commits: int
    samples: int

    @property
    def total_samples(self) -> int:
        return self.cases * self.device_classes * self.commits * self.samples


def case_ids(n: int) -> list[str]:
    """n distinct case ids, spread over a few families (the dashboard groups by family)."""
    return [f"{FAMILIES[i % len(FAMILIES)]}/k{i:05d}/{64 + i % 7 * 64}x{128 + i % 5 * 128}/f16/iree" for i in range(n)]


def device_class_names(n: int) -> list[str]:
    return [f"cpu-scale-{i:02d}" for i in range(n)]


def commit_sha(i: int) -> str:
    return f"{i:040x}"


class Levels:
    """Each series' true level per commit: a base level, and for ~10 % of series a step of 5-15 %
    (up or down) at a random commit. Deterministic in the seed."""

    def __init__(self, shape: Shape, seed: int) -> None:
        rng = np.random.default_rng(seed)
        n = shape.cases * shape.device_classes
        self.base = rng.uniform(10.0, 1000.0, size=n)
        stepped = rng.random(n) < 0.10
        self.step_at = np.where(stepped, rng.integers(10, max(11, shape.commits - 5), size=n), shape.commits + 1)
        self.step = np.where(stepped, rng.choice([-1, 1], size=n) * rng.uniform(0.05, 0.15, size=n), 0.0)
        self.shape = shape

    def of_commit(self, dc: int, commit: int) -> np.ndarray:
        """The true level of every case on device class `dc` at commit index `commit`."""
        lo, hi = dc * self.shape.cases, (dc + 1) * self.shape.cases
        return self.base[lo:hi] * np.where(commit >= self.step_at[lo:hi], 1.0 + self.step[lo:hi], 1.0)


def document(shape: Shape, levels: Levels, cases: Sequence[str], classes: Sequence[str], *, commit: int, dc: int,
             run_id: str, job_id: str, rng: np.random.Generator) -> ResultDocument:
    """One job's result document: every case, ok, with `shape.samples` samples (1 % noise) and clocks."""
    level = levels.of_commit(dc, commit)
    values = level[:, None] * (1.0 + 0.01 * rng.standard_normal((shape.cases, shape.samples)))
    values = np.abs(values).tolist()
    clocks = [1800.0] * shape.samples
    correctness = Correctness(passed=True, max_abs_error=1e-6, max_rel_error=1e-5, atol=1e-3, rtol=1e-3)
    results = [CaseResult(case=case, target=TARGET, status="ok", samples=samples, sample_clocks_mhz=clocks,
                          stats=summarize(samples), correctness=correctness)
               for case, samples in zip(cases, values, strict=True)]
    started = T0 + timedelta(hours=commit)
    return ResultDocument(
        run_id=run_id, job_id=job_id, repository=REPO, commit=commit_sha(commit),
        device=DeviceInfo(device_class=classes[dc], uid=f"scale-host-{dc:02d}", name="Scale CPU", host=f"bench-{dc:02d}",
                          driver="local-sync"),
        agent=AgentInfo(name=f"agent-{dc:02d}", version="0.1.0"),
        started_at=started, finished_at=started + timedelta(minutes=10), results=results)


def _entry(case: str) -> BundleEntry:
    return BundleEntry(
        case=case, target=TARGET, status="built",
        artifact=ArtifactRef(path=f"artifacts/{hashlib.sha1(case.encode()).hexdigest()}.vmfb", sha256="c" * 64,
                             size_bytes=1000),
        launch=LaunchSpec(entry_point="main", arguments=["a"], results=["c"]),
        tensors=[TensorSpec(name="a", role="input", shape=[64, 64], dtype="f16"),
                 TensorSpec(name="c", role="output", shape=[64, 64], dtype="f16")],
        reference=ReferenceSpec(module="gemm.reference", function="matmul", atol=1e-3, rtol=1e-3),
        flops=2 * 64**3, bytes=3 * 2 * 64**2,
        compile=CompileStats(compiler="iree-compile", compiler_version="3.13.0", compile_time_s=1.0, binary_bytes=4096,
                             registers=None, spills=0, shared_bytes=None))


# --- database lifecycle ----------------------------------------------------------------------


def _admin_url(url: str) -> tuple[str, str]:
    """(a libpq URL of the server's `postgres` database, the bench database's name)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise SystemExit("--url must be a postgresql:// URL (the scale bench measures PostgreSQL)")
    name = parsed.database or ""
    admin = parsed.set(drivername="postgresql", database="postgres")
    return admin.render_as_string(hide_password=False), name


def create_database(url: str) -> bool:
    """Create the database when missing; True when this call created it."""
    admin, name = _admin_url(url)
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            return False
        conn.execute(f'CREATE DATABASE "{name}"')
    return True


def drop_database(url: str) -> None:
    admin, name = _admin_url(url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- phases ----------------------------------------------------------------------------------


def setup(engine: sa.Engine, shape: Shape) -> dict[int, list[tuple[str, str]]]:
    """Repository, commits, device classes, the manifest and one push run per commit.
    Returns commit index -> [(run id, job id) per device class, in device-class order]."""
    cases, classes = case_ids(shape.cases), device_class_names(shape.device_classes)
    commits = [CommitInfo(sha=commit_sha(i), parents=[commit_sha(i - 1)] if i else [], message=f"commit {i}",
                          author="dev <dev@example.com>", committed_at=T0 + timedelta(hours=i), branch="main")
               for i in range(shape.commits)]
    with session_scope(engine) as s:
        ingest.upsert_repository(s, name=REPO)
        ingest.record_commits(s, repository=REPO, commits=commits)
        for name in classes:
            ingest.upsert_device_class(s, DeviceClass(name=name, kind="cpu", targets=[TARGET], runtime="iree",
                                                      hal_driver="local-sync", description="synthetic"))
        ingest.ingest_manifest(s, manifest=BundleManifest(
            repository=REPO, commit=commit_sha(0), suite_path="kernels", suite_digest="d" * 40, created_at=T0,
            compilers={"iree": "3.13.0"}, targets=[TARGET], entries=[_entry(c) for c in cases]), path="/bundles/0")
    jobs: dict[int, list[tuple[str, str]]] = {}
    for start in range(0, shape.commits, 100):
        with session_scope(engine) as s:
            for i in range(start, min(start + 100, shape.commits)):
                run = ingest.create_run(s, repository=REPO, commit_sha=commit_sha(i), kind="push",
                                        device_classes=classes)
                by_class = {j.device_class_id: j.id for j in run.jobs}
                order = sorted(by_class)  # device classes were created in name order
                jobs[i] = [(run.id, by_class[k]) for k in order]
    return jobs


def _batches(shape: Shape, batch: int, analysed_from: int | None = None) -> Iterator[list[tuple[int, int]]]:
    """(commit, device class) pairs in upload order (commit by commit), `batch` per transaction;
    no batch mixes commits before and from `analysed_from`."""
    pairs = [(c, d) for c in range(shape.commits) for d in range(shape.device_classes)]
    cut = len(pairs) if analysed_from is None else analysed_from * shape.device_classes
    for part in (pairs[:cut], pairs[cut:]):
        for i in range(0, len(part), batch):
            yield part[i:i + batch]


def load(engine: sa.Engine, shape: Shape, jobs: dict[int, list[tuple[str, str]]], *, batch: int, seed: int,
         analysed_commits: int, progress: bool) -> dict[str, Any]:
    """Ingest the documents of every commit but the newest `analysed_commits` (`analysed_uploads`
    uploads them after the re-analysis) through `ingest.ingest_result`, analysis off; times the
    ingest transactions only."""
    levels = Levels(shape, seed)
    rng = np.random.default_rng(seed + 1)
    cases, classes = case_ids(shape.cases), device_class_names(shape.device_classes)
    analysed_from = shape.commits - analysed_commits
    plain = {"seconds": 0.0, "samples": 0, "documents": 0, "transactions": 0}
    building = 0.0
    started = time.perf_counter()
    last_report = started
    for pairs in _batches(shape, batch, analysed_from):
        if pairs[0][0] >= analysed_from:
            break
        t = time.perf_counter()
        documents = [document(shape, levels, cases, classes, commit=c, dc=d, run_id=jobs[c][d][0],
                              job_id=jobs[c][d][1], rng=rng) for c, d in pairs]
        building += time.perf_counter() - t
        t = time.perf_counter()
        with session_scope(engine) as s:
            stored = sum(ingest.ingest_result(s, document=doc, analysis=None).samples for doc in documents)
        plain["seconds"] += time.perf_counter() - t
        plain["samples"] += stored
        plain["documents"] += len(documents)
        plain["transactions"] += 1
        if progress and time.perf_counter() - last_report > 30:
            last_report = time.perf_counter()
            print(f"  {plain['samples']:,} samples in {last_report - started:.0f} s "
                  f"(ingest {plain['samples'] / max(plain['seconds'], 1e-9):,.0f}/s)", file=sys.stderr, flush=True)
    rate = plain["samples"] / plain["seconds"] if plain["seconds"] else None
    return {"without_analysis": {**plain, "samples_per_s": rate}, "document_building_s": building,
            "wall_s": time.perf_counter() - started}


def http_batch_overhead(shape: Shape, jobs: dict[int, list[tuple[str, str]]], *, batch: int, seed: int) -> dict[str, Any]:
    """What POST /results/batch adds before ingest_result: JSON parsing and contract validation of
    one batch (the body an agent would send), timed on its own."""
    levels = Levels(shape, seed)
    rng = np.random.default_rng(seed + 2)
    cases, classes = case_ids(shape.cases), device_class_names(shape.device_classes)
    pairs = next(_batches(shape, batch))
    documents = [document(shape, levels, cases, classes, commit=c, dc=d, run_id=jobs[c][d][0], job_id=jobs[c][d][1],
                          rng=rng) for c, d in pairs]
    body = json.dumps([d.model_dump(mode="json") for d in documents]).encode()
    t = time.perf_counter()
    parsed = parse_batch(body)
    seconds = time.perf_counter() - t
    samples = sum(len(r.samples) for d in parsed for r in d.results)
    return {"body_bytes": len(body), "samples": samples, "parse_s": seconds, "samples_per_s": samples / seconds}


def _percentiles(times_ms: list[float]) -> dict[str, float]:
    ordered = sorted(times_ms)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return {"n": len(ordered), "p50_ms": pick(0.50), "p95_ms": pick(0.95), "max_ms": ordered[-1],
            "mean_ms": statistics.fmean(ordered)}


def time_series_history(engine: sa.Engine, n: int, seed: int) -> dict[str, Any]:
    with session_scope(engine) as s:
        ids = list(s.scalars(sa.select(Series.id).order_by(Series.id)))
    chosen = random.Random(seed).sample(ids, min(n, len(ids)))
    with session_scope(engine) as s:
        queries.series_history(s, chosen[0])  # warm-up: connection, statement compilation
    times, points = [], []
    for series_id in chosen:
        t = time.perf_counter()
        with session_scope(engine) as s:
            history = queries.series_history(s, series_id)
        times.append((time.perf_counter() - t) * 1000)
        points.append(len(history))
    return {**_percentiles(times), "points_per_series": statistics.fmean(points)}


def time_dashboard(engine: sa.Engine, runs: int, *, device_class: str | None = None,
                   per_group: int | None = None) -> dict[str, Any]:
    """`queries.dashboard` as the API calls it (every series), or as the page does (`per_group`)."""
    with session_scope(engine) as s:
        queries.dashboard(s, device_class=device_class, per_group=per_group)  # warm-up
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        with session_scope(engine) as s:
            board = queries.dashboard(s, device_class=device_class, per_group=per_group)
        times.append((time.perf_counter() - t) * 1000)
    return {**_percentiles(times), "series": sum(len(g.series) for g in board.groups), "counts": board.counts}


def time_reanalysis(engine: sa.Engine, subset: int | None) -> dict[str, Any]:
    """reanalyze_all in one transaction. With `subset`, the same work on that many series
    (`_run` over a list of ids: one chain, one measurements query, detect per series)."""
    settings = AnalysisSettings()
    with session_scope(engine) as session:
        series_total = session.scalar(sa.select(sa.func.count()).select_from(Series)) or 0
        t = time.perf_counter()
        if subset is None or subset >= series_total:
            summary = analysis.reanalyze_all(session, settings)
            analysed = summary.series
        else:
            ids = list(session.scalars(sa.select(Series.id).order_by(Series.id).limit(subset)))
            summary = analysis._run(session, ids, settings)
            analysed = summary.series
        session.flush()
        seconds = time.perf_counter() - t
        change_points = session.scalar(sa.select(sa.func.count()).select_from(ChangePoint))
    return {"series": analysed, "series_total": series_total, "seconds": seconds,
            "new_change_points": summary.new_change_points, "change_points_after": change_points,
            "extrapolated_full_s": seconds * series_total / analysed if analysed else None}


def analysed_uploads(engine: sa.Engine, shape: Shape, jobs: dict[int, list[tuple[str, str]]], *, first: int,
                     seed: int) -> dict[str, Any]:
    """The newest commits, each device class's job uploaded as a push with the service's default
    analysis: per upload, the ingest transaction's part and `analyze_after_ingest`'s part timed apart
    (the service runs both in one transaction, as here)."""
    levels = Levels(shape, seed)
    rng = np.random.default_rng(seed + 3)
    cases, classes = case_ids(shape.cases), device_class_names(shape.device_classes)
    settings = AnalysisSettings()
    uploads = []
    for commit in range(first, shape.commits):
        for dc in range(shape.device_classes):
            doc = document(shape, levels, cases, classes, commit=commit, dc=dc, run_id=jobs[commit][dc][0],
                           job_id=jobs[commit][dc][1], rng=rng)
            with session_scope(engine) as s:
                t = time.perf_counter()
                stored = ingest.ingest_result(s, document=doc, analysis=None).samples
                t_ingest = time.perf_counter() - t
                t, cpu = time.perf_counter(), time.process_time()
                summary = analysis.analyze_after_ingest(s, doc, settings)
                t_analysis, cpu_analysis = time.perf_counter() - t, time.process_time() - cpu
            uploads.append({"commit": commit, "device_class": dc, "samples": stored, "ingest_s": t_ingest,
                            "analysis_s": t_analysis, "analysis_cpu_s": cpu_analysis, "series": summary.series,
                            "new_change_points": summary.new_change_points})
            print(f"  upload commit {commit} class {dc}: ingest {t_ingest:.2f} s, analysis {t_analysis:.2f} s "
                  f"(its CPU time {cpu_analysis:.2f} s) "
                  f"({summary.series} series)", file=sys.stderr, flush=True)
    # the baseline: the whole-history analysis of the last upload's series (what every upload ran
    # before the incremental analysis), in a transaction rolled back
    with engine.connect() as connection:
        transaction = connection.begin()
        with Session(connection) as s:
            series_ids = list(s.scalars(sa.select(Series.id).join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id)
                                        .where(DeviceClassRow.name == classes[-1])))
            repository_id = s.execute(sa.select(Run.repository_id).limit(1)).scalar_one()
            t, cpu = time.perf_counter(), time.process_time()
            analysis._run(s, series_ids, settings, repository_ids=[repository_id])
            whole_history_s, whole_history_cpu_s = time.perf_counter() - t, time.process_time() - cpu
        transaction.rollback()
    print(f"  baseline: whole-history analysis of the last upload's {len(series_ids)} series {whole_history_s:.2f} s "
          f"(its CPU time {whole_history_cpu_s:.2f} s)", file=sys.stderr, flush=True)
    analysis_s = [u["analysis_s"] for u in uploads]
    warm = analysis_s[shape.device_classes:] or analysis_s   # the first upload of each class reads its tails cold
    return {"uploads": uploads, "cases_per_upload": shape.cases, "history_commits": shape.commits,
            "baseline_whole_history_analysis_s": whole_history_s,
            "baseline_whole_history_analysis_cpu_s": whole_history_cpu_s,
            "analysis_cpu_s_median": statistics.median(u["analysis_cpu_s"] for u in uploads[shape.device_classes:] or uploads),
            "analysis_s_median": statistics.median(warm), "analysis_s_max": max(warm),
            "ingest_s_median": statistics.median(u["ingest_s"] for u in uploads),
            "samples_per_s_with_analysis": sum(u["samples"] for u in uploads) / sum(
                u["ingest_s"] + u["analysis_s"] for u in uploads)}


def check_against_batch(engine: sa.Engine) -> dict[str, Any]:
    """The store's standing change points (suspected or confirmed) of every series against a batch
    `changepoints.analyse` of its whole history now: how many series differ (target 0)."""
    from pipeline.results.analysis import changepoints
    from pipeline.results.store.history import default_branch_chain

    settings = AnalysisSettings()
    t = time.perf_counter()
    differing: list[dict[str, Any]] = []
    series_checked = 0
    with session_scope(engine) as s:
        standing: dict[int, set[int]] = {}
        for series_id, commit_id in s.execute(sa.select(ChangePoint.series_id, ChangePoint.after_commit_id)
                                              .where(ChangePoint.lifecycle != "retracted")):
            standing.setdefault(series_id, set()).add(commit_id)
        for repository_id in s.scalars(sa.select(Commit.repository_id).distinct()):
            chain = default_branch_chain(s, repository_id)
            every = list(s.scalars(sa.select(Series.id).order_by(Series.id)))
            histories = (item for i in range(0, len(every), 500)
                         for item in analysis._histories(s, chain, every[i:i + 500]).items())
            for series_id, history in histories:
                found = changepoints.analyse(history.values, window=settings.window, max_pvalue=settings.max_pvalue,
                                             min_magnitude=settings.min_magnitude, min_size=settings.min_size,
                                             confirm_size=settings.confirm_size,
                                             confirm_pvalue=settings.confirm_pvalue)
                points = found.confirmed + found.pending + ([found.suspected] if found.suspected else [])
                batch = {int(history.commit_ids[cp.index]) for cp in points}
                series_checked += 1
                if batch != standing.get(series_id, set()):
                    differing.append({"series": series_id, "batch": sorted(batch),
                                      "store": sorted(standing.get(series_id, set()))})
    return {"series_checked": series_checked, "series_differing": len(differing), "examples": differing[:10],
            "seconds": time.perf_counter() - t}


def store_size(engine: sa.Engine) -> dict[str, Any]:
    with engine.connect() as c:
        counts = {name: c.scalar(sa.select(sa.func.count()).select_from(model)) for name, model in
                  (("commits", Commit), ("runs", Run), ("jobs", Job), ("series", Series),
                   ("measurements", Measurement), ("change_points", ChangePoint))}
        # samples: one array per measurement holding n of them
        counts["samples"] = int(c.scalar(sa.select(sa.func.coalesce(sa.func.sum(Measurement.n), 0))) or 0)
        counts["database_bytes"] = c.scalar(sa.text("SELECT pg_database_size(current_database())"))
        counts["postgresql"] = c.scalar(sa.text("SHOW server_version"))
    return counts


def machine() -> dict[str, Any]:
    def run(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False).stdout.strip()
        except OSError:
            return ""

    return {"nproc": os.cpu_count(), "lscpu": run("lscpu").splitlines()[:12], "python": platform.python_version(),
            "loadavg_start": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="postgresql://root@127.0.0.1:5432/benchfarm_scale")
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--device-classes", type=int, default=10)
    parser.add_argument("--commits", type=int, default=500)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--batch", type=int, default=10, help="result documents per transaction (one job each)")
    parser.add_argument("--analysed-commits", type=int, default=3,
                        help="the last N commits are uploaded after the re-analysis, each with the default analysis "
                             "on (analysis time per upload reported apart)")
    parser.add_argument("--check", action="store_true",
                        help="at the end, compare every series' standing change points with a batch analysis")
    parser.add_argument("--history-queries", type=int, default=200)
    parser.add_argument("--dashboard-runs", type=int, default=30)
    parser.add_argument("--reanalyze-series", type=int, default=None,
                        help="re-analyse only this many series and extrapolate (default: all)")
    parser.add_argument("--seed", type=int, default=20261122)
    parser.add_argument("--skip-load", action="store_true", help="measure an existing store (from a --keep run)")
    parser.add_argument("--keep", action="store_true", help="leave the database in place")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = parser.parse_args()
    shape = Shape(args.cases, args.device_classes, args.commits, args.samples)

    report: dict[str, Any] = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
                              "shape": vars(shape) | {"total_samples": shape.total_samples}, "batch": args.batch,
                              "targets": TARGETS}
    created = False
    if not args.skip_load:
        created = create_database(args.url)
        if not created:
            raise SystemExit(f"{args.url} exists already: drop it, or measure it with --skip-load")
    try:
        if args.skip_load:
            engine = make_engine(args.url)
        else:
            engine = open_store(args.url)
            t = time.perf_counter()
            jobs = setup(engine, shape)
            report["setup_s"] = time.perf_counter() - t
            print(f"setup: {report['setup_s']:.1f} s; loading {shape.total_samples:,} samples", file=sys.stderr)
            report["http_batch_parse"] = http_batch_overhead(shape, jobs, batch=args.batch, seed=args.seed)
            analysed_commits = min(args.analysed_commits, shape.commits)
            report["load"] = load(engine, shape, jobs, batch=args.batch, seed=args.seed,
                                  analysed_commits=analysed_commits, progress=True)
            with engine.connect() as c:
                c.execute(sa.text("COMMIT"))
                for table in ("measurements", "series", "commits", "change_points", "case_results"):
                    c.execute(sa.text(f"ANALYZE {table}"))
        report["reanalysis"] = time_reanalysis(engine, args.reanalyze_series)
        print(f"reanalysis: {report['reanalysis']}", file=sys.stderr)
        if not args.skip_load and analysed_commits:
            report["analysed_uploads"] = analysed_uploads(engine, shape, jobs, first=shape.commits - analysed_commits,
                                                          seed=args.seed)
            print(f"analysed uploads: median {report['analysed_uploads']['analysis_s_median']:.3f} s of analysis "
                  f"per {shape.cases}-case upload", file=sys.stderr)
        if args.check:
            report["check_against_batch"] = check_against_batch(engine)
            print(f"check: {report['check_against_batch']}", file=sys.stderr)
        report["store"] = store_size(engine)
        print(f"store: {report['store']}", file=sys.stderr)
        freeze_startup_heap()  # the queries run as in the service, whose start-up heap is frozen
        report["series_history"] = time_series_history(engine, args.history_queries, args.seed)
        print(f"series_history: {report['series_history']}", file=sys.stderr)
        report["dashboard"] = time_dashboard(engine, args.dashboard_runs)
        print(f"dashboard: {report['dashboard']}", file=sys.stderr)
        report["dashboard_page_query"] = time_dashboard(engine, args.dashboard_runs, per_group=40)
        print(f"dashboard_page_query: {report['dashboard_page_query']}", file=sys.stderr)
        first_class = device_class_names(1)[0]
        report["dashboard_one_device_class"] = time_dashboard(engine, args.dashboard_runs, device_class=first_class)
        report["machine"]["loadavg_end"] = os.getloadavg()
        engine.dispose()
    finally:
        if created and not args.keep:
            drop_database(args.url)
            report["dropped"] = True
    rate = report.get("load", {}).get("without_analysis", {}).get("samples_per_s")
    report["ratios"] = {
        "ingest_vs_target": rate / TARGETS["ingest_samples_per_s"] if rate else None,
        "series_history_p95_vs_target": report["series_history"]["p95_ms"] / TARGETS["series_history_p95_ms"],
        "dashboard_p95_vs_target": report["dashboard"]["p95_ms"] / TARGETS["dashboard_p95_ms"],
    }
    text = json.dumps(report, indent=2, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
