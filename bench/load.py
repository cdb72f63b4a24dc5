"""The service under a farm's load on PostgreSQL (issue 33): a real `benchfarm serve` (one process,
as the compose file runs it: the service has no worker-count setting; its synchronous routes run
in the server's thread pool), `--agents` agent processes at once registering, claiming and
uploading full-suite paired documents, while `--readers` readers load the dashboard, series and
compare pages.

Each agent is a process of its own speaking the agents' HTTP client (`agents.client.ServiceClient`,
no retries, so that no 5xx hides behind one) and their chunked delivery (`agents.upload.deliver`,
the default chunk budget): POST /agents (its GPU of class nvidia-h200), then per document POST
/jobs/claim, the document's chunks, POST /jobs/{id}/complete. A document is `--cases` paired ok
cases x `--samples` head samples (default 164 x 14,000 = 2.3 million), each with as many paired
base samples, an SM clock and a temperature per sample, packed as the agent packs them
(`tests.helpers.full_suite.paired_result`). Each agent builds its cases before the start, untimed.

Phases, on one fresh database (created, dropped at the end unless `--keep`):
1. single writer (the baseline, in this process): `bench/store_scale.py`'s setup and load of a
   small history (`--scale-*`; analysis off): its ingest rate in samples/s. The history is also
   what the readers' dashboard and series pages show;
2. the farm's jobs: `--agents` x `--docs` queued PR jobs of one commit, paired with its base, on
   the GPU class, their bundles registered (`bench/large_document.py`'s manifests);
3. `benchfarm serve` started (`_gpu_farm.GpuFarm`, on the bench's database); one agent alone
   uploads one more document (the service's single-agent rate, the second baseline);
4. the load: every agent process released at once (each has built its cases), and with them the
   readers, who loop over their pages until the last agent ends (each loads every page once at
   least). The service's resident memory (VmRSS) is sampled every 0.5 s, its peak (VmHWM) read at
   the end.
5. accounting: every job done; the store's samples (head, paired base) equal those sent, each
   (job, case) once.

    python bench/load.py --agents 32 --readers 8 --cases 164 --samples 14000 --out load.json

Reported: documents and samples (head samples; each carries a paired base sample, a clock and a
temperature too) ingested per second over the load phase (first release to last completion),
p50/p99/max of claims, chunk uploads, completions and each page, the 4xx/5xx answers, the service's
RSS, the accounting, and the ingest rate against the single writers'.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import requests
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import large_document  # noqa: E402 - the full-suite manifests and commits of the one-document bench
import store_scale  # noqa: E402 - the single-writer baseline and the database lifecycle
from _gpu_farm import TOKEN, GpuFarm  # noqa: E402 - `benchfarm serve` as the benches start it

from pipeline.agents.client import ServiceClient, ServiceError  # noqa: E402
from pipeline.agents.upload import DEFAULT_CHUNK_BYTES, deliver  # noqa: E402
from pipeline.contracts import CommitInfo, DeviceClass  # noqa: E402
from pipeline.results.store import ingest  # noqa: E402
from pipeline.results.store.db import open_store, session_scope  # noqa: E402
from pipeline.results.store.models import Job, Series  # noqa: E402
from tests.helpers.full_suite import paired_result  # noqa: E402

REPO, HEAD, BASE = large_document.REPO, large_document.HEAD, large_document.BASE
GPU_CLASS = DeviceClass(name=large_document.DEVICE_CLASS, kind="gpu", targets=[large_document.TARGET], runtime="cuda")


def percentiles(times_ms: list[float]) -> dict[str, float | int]:
    if not times_ms:
        return {"n": 0}
    ordered = sorted(times_ms)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 1)

    return {"n": len(ordered), "p50_ms": pick(0.50), "p99_ms": pick(0.99), "max_ms": round(ordered[-1], 1)}


# --- the store before the load ------------------------------------------------------------------


def single_writer(engine: sa.Engine, args: argparse.Namespace) -> dict[str, Any]:
    """bench/store_scale.py's load phase on a small shape (one writer, analysis off)."""
    shape = store_scale.Shape(args.scale_cases, args.scale_classes, args.scale_commits, args.scale_samples)
    jobs = store_scale.setup(engine, shape)
    loaded = store_scale.load(engine, shape, jobs, batch=10, seed=20261127, analysed_commits=0, progress=False)
    plain = loaded["without_analysis"]
    return {"shape": vars(shape), "samples": plain["samples"], "seconds": round(plain["seconds"], 2),
            "samples_per_s": round(plain["samples_per_s"])}


def queue_jobs(engine: sa.Engine, cases: int, count: int) -> list[str]:
    """`count` PR jobs of HEAD paired with BASE on the GPU class, claimable (bundles registered)."""
    t0 = datetime(2026, 11, 27, tzinfo=UTC)
    with session_scope(engine) as s:
        ingest.record_commits(s, repository=REPO, commits=[
            CommitInfo(sha=BASE, committed_at=t0), CommitInfo(sha=HEAD, parents=[BASE], committed_at=t0)])
        ingest.upsert_device_class(s, GPU_CLASS)
        head, base = (ingest.ingest_manifest(s, manifest=large_document.manifest(c, cases), path=f"/bundles/{c[:4]}")
                      for c in (HEAD, BASE))
        ids = []
        for _ in range(count):
            run = ingest.create_run(s, repository=REPO, commit_sha=HEAD, kind="pr", device_classes=[GPU_CLASS.name])
            ids.append(run.jobs[0].id)
        s.execute(sa.update(Job).where(Job.id.in_(ids)).values(bundle_digest=head,
                                                                base_bundle_digest=base))
    return ids


# --- one agent ------------------------------------------------------------------------------------


def agent_main(index: int, url: str, docs: int, cases: int, samples: int, chunk_bytes: int,
               start: Any, out: Any) -> None:
    """One agent process: build its cases, wait at the `start` barrier, register, then claim, deliver and
    complete `docs` documents. Puts its record on `out`."""
    name = f"load-agent-{index:02d}"
    uid = f"GPU-load-{index:02d}"
    rng = np.random.default_rng(index)
    results = [paired_result(i, rng, samples, target=large_document.TARGET, base=BASE) for i in range(cases)]
    client = ServiceClient(url, TOKEN, timeout_s=600, retries=0)
    record: dict[str, Any] = {"agent": name, "claim_ms": [], "upload_ms": [], "complete_ms": [], "register_ms": [],
                              "documents": 0, "samples_sent": 0, "stored": 0, "duplicates": 0, "errors": [],
                              "statuses": {}}

    def timed(kind: str, call: Callable[[], Any]) -> Any:
        t = time.perf_counter()
        try:
            return call()
        except ServiceError as exc:
            record["statuses"][str(exc.status)] = record["statuses"].get(str(exc.status), 0) + 1
            raise
        finally:
            record[f"{kind}_ms"].append((time.perf_counter() - t) * 1000)

    start.wait()   # a Barrier: the other agents and the bench are ready
    record["started"] = time.time()
    try:
        timed("register", lambda: client.post("agents", {"name": name, "host": f"load-{index}", "version": "bench",
                                                         "devices": [{"device_class": GPU_CLASS.model_dump(mode="json"),
                                                                      "info": {"device_class": GPU_CLASS.name,
                                                                               "uid": uid, "name": "H200"}}]}))
        for _ in range(docs):
            # as the agent claims: a long poll of the service's claim_wait_s, looking again every claim_poll_s
            response = timed("claim", lambda: client.request("POST", "jobs/claim", timeout_s=600, json={
                "agent": name, "devices": [{"uid": uid, "device_class": GPU_CLASS.name}]}))
            if response.status_code == 204:
                record["errors"].append("no job to claim")
                break
            job = response.json()
            now = datetime.now(UTC)
            document = {"schema_version": 1, "run_id": job["run_id"], "job_id": job["job_id"], "repository": REPO,
                        "commit": HEAD, "device": {"device_class": GPU_CLASS.name, "uid": uid, "name": "H200",
                                                   "host": f"load-{index}"},
                        "agent": {"name": name, "version": "bench"},
                        "started_at": (now - timedelta(minutes=5)).isoformat(), "finished_at": now.isoformat(),
                        "results": results}
            delivered = deliver(client, document, budget_bytes=chunk_bytes,
                                post=lambda chunk: timed("upload", lambda: client.post_raw("results", chunk)))
            timed("complete", lambda: client.post(f"jobs/{job['job_id']}/complete", {"agent": name}))
            record["documents"] += 1
            record["samples_sent"] += cases * samples
            record["stored"] += delivered.stored
            record["duplicates"] += delivered.duplicates
    except Exception as exc:  # noqa: BLE001 - reported, and the accounting fails
        record["errors"].append(f"{type(exc).__name__}: {exc}"[:500])
    record["ended"] = time.time()
    out.put(record)


def run_agents(context: Any, url: str, count: int, first: int, args: argparse.Namespace,
               on_release: Callable[[], None] = lambda: None) -> list[dict[str, Any]]:
    """`count` agent processes released at once, once each has built its cases (then `on_release`);
    their records."""
    start, out = context.Barrier(count + 1), context.Queue()
    procs = [context.Process(target=agent_main, args=(first + i, url, args.docs if count > 1 else 1, args.cases,
                                                      args.samples, args.chunk_bytes, start, out))
             for i in range(count)]
    for proc in procs:
        proc.start()
    building = time.perf_counter()
    start.wait()   # every agent has built its cases: all go at once
    on_release()
    print(f"  {count} agent(s) released after {time.perf_counter() - building:.0f} s of building", file=sys.stderr,
          flush=True)
    records = [out.get() for _ in procs]
    for proc in procs:
        proc.join()
    return records


# --- readers and the service's memory -------------------------------------------------------------


def reader(url: str, pages: list[tuple[str, str]], stop: threading.Event, times: dict[str, list[float]],
           statuses: dict[int, int]) -> None:
    with requests.Session() as http:
        i = 0
        while not stop.is_set() or i < len(pages):   # every page at least once
            kind, path = pages[i % len(pages)]
            i += 1
            t = time.perf_counter()
            response = http.get(url + path, timeout=300)
            times.setdefault(kind, []).append((time.perf_counter() - t) * 1000)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def accounting(engine: sa.Engine, job_ids: list[str], cases: int, samples_sent: int) -> dict[str, Any]:
    """What the store holds of the farm's jobs against what the agents sent."""
    with engine.connect() as c:
        statuses: dict[str, int] = dict(c.execute(sa.text("SELECT status, COUNT(*) FROM jobs WHERE id = ANY(:ids) GROUP BY status"),
                                  {"ids": job_ids}).all())
        results, distinct = c.execute(sa.text(
            "SELECT COUNT(*), COUNT(DISTINCT (job_id, case_id, target)) FROM case_results WHERE job_id = ANY(:ids)"),
            {"ids": job_ids}).one()
        n, head, paired = c.execute(sa.text(
            "SELECT COALESCE(SUM(m.n), 0), COALESCE(SUM(length(m.samples)), 0) / 8, "
            "COALESCE(SUM(length(r.paired_samples)), 0) / 8 FROM case_results r "
            "JOIN measurements m ON m.case_result_id = r.id WHERE r.job_id = ANY(:ids)"), {"ids": job_ids}).one()
    done = statuses.get("done", 0)
    return {"jobs": statuses, "case_results": results, "distinct_job_case_target": distinct,
            "expected_case_results": done * cases, "samples_sent": samples_sent, "samples_stored": int(n),
            "head_samples_in_arrays": int(head), "paired_samples_in_arrays": int(paired),
            "lost": samples_sent - int(n), "duplicated_case_results": results - distinct,
            "ok": (done == len(job_ids) and results == distinct == done * cases
                   and int(n) == int(head) == int(paired) == samples_sent)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="postgresql://root@127.0.0.1:5432/benchfarm_load")
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--docs", type=int, default=1, help="documents each agent uploads")
    parser.add_argument("--readers", type=int, default=8)
    parser.add_argument("--cases", type=int, default=164)
    parser.add_argument("--samples", type=int, default=14_000, help="head samples per case")
    parser.add_argument("--chunk-bytes", type=int, default=DEFAULT_CHUNK_BYTES)
    parser.add_argument("--scale-cases", type=int, default=200)
    parser.add_argument("--scale-classes", type=int, default=2)
    parser.add_argument("--scale-commits", type=int, default=20)
    parser.add_argument("--scale-samples", type=int, default=10)
    parser.add_argument("--keep", action="store_true", help="leave the database in place")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    report: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "commit": commit.strip(),
        "machine": f"{platform.node()}, {os.cpu_count()} cores, load {os.getloadavg()}",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "shape": {"agents": args.agents, "docs_per_agent": args.docs, "readers": args.readers, "cases": args.cases,
                  "head_samples_per_document": args.cases * args.samples, "chunk_bytes": args.chunk_bytes}}
    if not store_scale.create_database(args.url):
        raise SystemExit(f"{args.url} exists already: drop it first")
    home = Path(tempfile.mkdtemp(prefix="bf-load-"))
    farm: GpuFarm | None = None
    try:
        engine = open_store(args.url)
        report["single_writer_store_scale"] = single_writer(engine, args)
        print(f"single writer (store_scale): {report['single_writer_store_scale']}", file=sys.stderr, flush=True)
        job_ids = queue_jobs(engine, args.cases, args.agents * args.docs + 1)
        with session_scope(engine) as s:
            series = list(s.scalars(sa.select(Series.id).order_by(Series.id).limit(50)))
        farm = GpuFarm(home, service_env={"BENCHFARM_DATABASE_URL": args.url})
        service, url = farm.proc, farm.url
        context = multiprocessing.get_context("spawn")

        (alone,) = run_agents(context, url, 1, 99, args)
        assert not alone["errors"], alone
        seconds = alone["ended"] - alone["started"]
        report["single_agent_http"] = {"seconds": round(seconds, 2), "samples": alone["samples_sent"],
                                       "samples_per_s": round(alone["samples_sent"] / seconds),
                                       "upload": percentiles(alone["upload_ms"])}
        print(f"one agent alone: {report['single_agent_http']}", file=sys.stderr, flush=True)

        pages = [("dashboard", "/"), ("compare", f"/compare?repository={REPO}&head={HEAD}&base={BASE}")]
        pages += [("series", f"/series/{i}") for i in series[: max(1, args.readers)]]
        stop = threading.Event()
        rss: list[float] = [rss_mib(service.pid)]
        # each reader its own tallies (merged at the end), starting at its own page
        tallies: list[tuple[dict[str, list[float]], dict[int, int]]] = [({}, {}) for _ in range(args.readers)]
        readers = [threading.Thread(target=reader, args=(url, pages[i % len(pages):] + pages[:i % len(pages)], stop,
                                                         *tallies[i]), daemon=True)
                   for i in range(args.readers)]

        def sample_rss() -> None:
            while not stop.wait(0.5):
                rss.append(rss_mib(service.pid))

        def release() -> None:
            for thread in [sampler, *readers]:
                thread.start()

        sampler = threading.Thread(target=sample_rss, daemon=True)
        records = run_agents(context, url, args.agents, 0, args, on_release=release)
        stop.set()
        for thread in readers:
            thread.join()
        sampler.join()
        peak = rss_mib(service.pid, "VmHWM")
        page_times: dict[str, list[float]] = {}
        page_statuses: dict[int, int] = {}
        for times, codes in tallies:
            for kind, values in times.items():
                page_times.setdefault(kind, []).extend(values)
            for code, count in codes.items():
                page_statuses[code] = page_statuses.get(code, 0) + count

        start, end = min(r["started"] for r in records), max(r["ended"] for r in records)
        documents = sum(r["documents"] for r in records)
        samples_sent = sum(r["samples_sent"] for r in records) + alone["samples_sent"]
        statuses: dict[str, int] = {}
        for r in records:
            for code, count in r["statuses"].items():
                statuses[code] = statuses.get(code, 0) + count
        rate = sum(r["samples_sent"] for r in records) / (end - start)
        report["load"] = {
            "seconds": round(end - start, 2), "documents": documents,
            "documents_per_s": round(documents / (end - start), 3),
            "head_samples_per_s": round(rate), "register": percentiles([t for r in records for t in r["register_ms"]]),
            "claim": percentiles([t for r in records for t in r["claim_ms"]]),
            "upload_chunk": percentiles([t for r in records for t in r["upload_ms"]]),
            "complete": percentiles([t for r in records for t in r["complete_ms"]]),
            "pages": {kind: percentiles(times) for kind, times in page_times.items()},
            "agent_errors": {r["agent"]: r["errors"] for r in records if r["errors"]},
            "agent_error_statuses": statuses, "page_statuses": page_statuses,
            "answers_5xx": sum(c for code, c in statuses.items() if code.startswith("5") or code == "0")
            + sum(c for code, c in page_statuses.items() if code >= 500),
            "service_rss_mib": {"start": round(rss[0]), "max_sampled": round(max(rss)), "end": round(rss[-1]),
                                "peak_vmhwm": round(peak)}}
        report["accounting"] = accounting(engine, job_ids, args.cases, samples_sent)
        report["ratios"] = {
            "load_vs_store_scale_single_writer": round(rate / report["single_writer_store_scale"]["samples_per_s"], 2),
            "load_vs_one_agent_alone": round(rate / report["single_agent_http"]["samples_per_s"], 2)}
        engine.dispose()
    finally:
        if farm is not None:
            farm.stop()
        log = home / "service.log"
        report["service_log_tail"] = log.read_text()[-1500:] if log.exists() else ""
        shutil.rmtree(home, ignore_errors=True)
        if not args.keep:
            store_scale.drop_database(args.url)
    text = json.dumps(report, indent=2, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    if not report.get("accounting", {}).get("ok") or report.get("load", {}).get("answers_5xx"):
        raise SystemExit("load bench: the accounting or the answers are wrong (above)")


if __name__ == "__main__":
    main()
