"""Hardware counters on an NVIDIA GPU through real processes (issue 32): Nsight Compute's counters of
the CUDA suite, taken by `benchfarm run-job` agents, stored and compared by `benchfarm serve`.

Two steps (the GPU host has no Triton 3.9 and no network; it needs `ncu`):

    .venv/bin/python bench/counters.py build --out .gpu/counters      # here: three commits, cuda:sm_90
    python3 bench/counters.py run --bundles .gpu/counters --out $OUT   # on the GPU host (with .whl)

`build` clones this checkout and commits, each on top of `base` (HEAD): `all-tiles` (every Triton GEMM
tile's pipeline depth changed: gpu_acceptance's PR (b)) and `rename` (every Triton kernel function
renamed, nothing else: every Triton binary differs from base's, none of their code does).

`run`, first one GEMM's counters taken directly (`preflight`: what ncu reads, or why it cannot), then
one job after another (timing cut to one short round a case where only counters matter: `QUICK`),
writing OUT/counters.json after each:
1. `suite-cold`: base, every case, empty check and counter caches: the time to take the whole CUDA
   suite's counters cold (the job environment's `counters_s`), and every case's counters;
2. `suite-cached`: base again: the same with the counters kept from job 1;
3. `pr-rename`: rename over base as a pull request, default measurement settings: its wall time (the
   issue's bar: under 60 s of GPU), what it timed and the verdict;
4. `pr-all-tiles`: all-tiles over base as a pull request: the GEMM cases whose tiles changed, their
   counters against the base's (instructions, DRAM bytes) and each row's summary;
5. `repeat-2`, `repeat-3`: base's GEMM cases again, each job with a counter cache of its own (taken
   afresh): with job 1, the counters of each artifact in 3 jobs, identical or not, per counter.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _gpu_farm import GpuFarm, build_variants, cuda_device_class, scratch  # noqa: E402
from _two_step import two_step_main  # noqa: E402
from gpu_acceptance import VARIANTS as ACCEPTANCE  # noqa: E402
from gpu_acceptance import rename_kernels  # noqa: E402

VARIANTS = {"base": ACCEPTANCE["base"], "all-tiles": ACCEPTANCE["all-tiles"], "rename": rename_kernels}
QUICK = {"BENCHFARM_MEASUREMENT__DEVICE_OVERRIDES": json.dumps({"gpu": {
    "rounds": 1, "min_rounds": 1, "min_samples": 2, "max_samples": 10, "min_time_s": 0.0, "max_time_s": 0.05,
    "warmup_s": 0.0, "placements": 1}})}
"""Agent settings of the jobs that are about counters, not latency: one round of a few samples a case."""
REPEATED = "gemm/*/triton"
"""The cases taken three times (the GEMMs: what the tile edits touch)."""
EXACT = ("instructions", "dram_read_bytes", "dram_write_bytes")


def build(out: Path) -> None:
    build_variants(out, VARIANTS, target=os.environ.get("COUNTERS_TARGET", "cuda:sm_90"), from_first=True)


def _save(out: Path, report: dict[str, Any]) -> None:
    partial = out / "counters.json.tmp"
    partial.write_text(json.dumps(report, indent=1))
    os.replace(partial, out / "counters.json")


def _newest_job(farm: GpuFarm, sha: str) -> str:
    return str(farm.query("SELECT j.id FROM jobs j JOIN runs r ON j.run_id = r.id JOIN commits c ON r.commit_id = c.id "
                          "WHERE c.sha = ? ORDER BY j.finished_at DESC LIMIT 1", sha)[0][0])


def _counters(farm: GpuFarm, job: str) -> dict[str, dict[str, float]]:
    """case -> counter -> value of a job's results (their own, not their paired bases')."""
    out: dict[str, dict[str, float]] = {}
    for case, metric, value in farm.query(
            "SELECT cs.case_id, s.metric, cv.value FROM counter_values cv JOIN case_results cr ON cv.case_result_id = cr.id "
            "JOIN cases cs ON cr.case_id = cs.id JOIN series s ON cv.series_id = s.id WHERE cr.job_id = ? AND NOT cv.base",
            job):
        out.setdefault(case, {})[metric] = value
    return out


def _notes(farm: GpuFarm, job: str) -> dict[str, int]:
    """How many ok results of the job say each thing of their counters (how taken, or why none)."""
    notes: dict[str, int] = {}
    for (environment,) in farm.query("SELECT environment FROM case_results WHERE job_id = ? AND status = 'ok'", job):
        env = json.loads(environment) if isinstance(environment, str) else (environment or {})
        note = env.get("counters", "(none said)")
        note = "kept (counter cache)" if "counter cache" in note else note
        notes[note] = notes.get(note, 0) + 1
    return notes


def _job_environment(farm: GpuFarm, job: str) -> dict[str, str]:
    (environment,) = farm.query("SELECT environment FROM jobs WHERE id = ?", job)[0]
    return json.loads(environment) if isinstance(environment, str) else (environment or {})


def _same(runs: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    """Per counter: of the cases every run has, how many read the same in all, and the largest spread."""
    cases = sorted(set.intersection(*(set(r) for r in runs))) if runs else []
    out: dict[str, Any] = {"cases": len(cases)}
    for metric in ("instructions", "dram_read_bytes", "dram_write_bytes", "l2_hit_rate", "achieved_occupancy"):
        spreads = {c: max(r[c].get(metric, float("nan")) for r in runs) - min(r[c].get(metric, float("nan")) for r in runs)
                   for c in cases}
        out[metric] = {"identical": sum(1 for v in spreads.values() if v == 0),
                       "largest_spread": max(spreads.values(), default=None),
                       "worst_case": max(spreads, key=lambda c: spreads[c]) if spreads else None}
    return out


def _preflight(bundle: Path) -> dict[str, Any]:
    """One GEMM's counters taken directly (ncu over one launch, as an agent does), before any job: what
    ncu reads and how long one binary costs with ncu's start-up, or why it cannot."""
    from pipeline.agents.counters import CounterRequest, CountersUnavailable, NcuProfiler
    from pipeline.agents.run_job import bundle_folder
    from pipeline.contracts.bundle_dir import load_bundle

    folder = bundle_folder(bundle)
    entry = next(e for e in load_bundle(folder).entries if e.case.endswith("/triton") and e.case.startswith("gemm/"))
    started = time.perf_counter()
    try:
        got = NcuProfiler.find(None, 300).collect_many([CounterRequest(folder, entry, 1)])[0]
    except CountersUnavailable as exc:
        got = exc
    seconds = round(time.perf_counter() - started, 2)
    if isinstance(got, CountersUnavailable):
        return {"case": str(entry.case), "seconds": seconds, "unavailable": str(got)}
    return {"case": str(entry.case), "seconds": seconds, "profiler": got.profiler, "values": got.values}


def run(bundles: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    local = scratch("bf-counters-bundles")   # outside the tree the device tool re-sends at every call
    shutil.rmtree(local, ignore_errors=True)
    shutil.copytree(bundles, local)
    bundles = local
    shas = json.loads((bundles / "shas.json").read_text())
    device_class = os.environ.get("COUNTERS_DEVICE_CLASS") or cuda_device_class()
    ncu = shutil.which("ncu")
    report: dict[str, Any] = {"device_class": device_class, "shas": shas, "ncu": ncu, "jobs": []}
    _save(out, report)
    report["preflight"] = _preflight(bundles / "base")
    _save(out, report)
    farm = GpuFarm(scratch("bf-counters"))
    started = time.perf_counter()
    try:
        def job(label: str, head: str, base: str | None = None, *, pr: bool = False, quick: bool = True,
                cases: str | None = None, counters: str = "counters") -> tuple[dict[str, Any], dict[str, Any]]:
            info = farm.run_job(bundles / head, device_class, base=bundles / base if base else None, pr=pr,
                                name=label, extra_env=QUICK if quick else None, cases=cases, counters=counters)
            job_id = _newest_job(farm, shas[head])
            environment = _job_environment(farm, job_id)
            entry = {"label": label, "head": head, "base": base, "pr": pr, "cases": cases,
                     "wall_s": round(info["wall_s"], 1), "phases": info["phases"],
                     **{k: environment.get(k) for k in ("counters_s", "counters_taken", "counters_reused",
                                                        "checks_run", "checks_reused")},
                     "counter_notes": _notes(farm, job_id)}
            report["jobs"].append(entry)
            _save(out, report)
            print(f"{label}: {info['wall_s']:.0f} s, counters {entry['counters_s']} s "
                  f"({entry['counters_taken']} taken, {entry['counters_reused']} kept)", flush=True)
            return entry, _counters(farm, job_id)

        cold, cold_counters = job("suite-cold", "base")
        cached, cached_counters = job("suite-cached", "base")
        report["suite"] = {"cases_with_counters": len(cold_counters), "cold_s": cold["counters_s"],
                           "cached_s": cached["counters_s"], "cached_equal_cold": cached_counters == cold_counters}
        _save(out, report)

        rename, _ = job("pr-rename", "rename", "base", pr=True, quick=False)
        body, _ = farm.compare(shas["rename"])
        rows = [r for c in body["comparisons"] for r in c["rows"]]
        report["rename"] = {"wall_s": rename["wall_s"], "under_60_s": rename["wall_s"] < 60, "verdict": body["verdict"],
                            "counts": {k: v for k, v in body["counts"].items() if v},
                            "same_code_rows": sum(1 for r in rows if r.get("same_code")),
                            "timed_rows": sum(1 for r in rows if r["status"] != "unchanged")}
        _save(out, report)

        tiles, _ = job("pr-all-tiles", "all-tiles", "base", pr=True)
        body, _ = farm.compare(shas["all-tiles"])
        changed = []
        for row in (r for c in body["comparisons"] for r in c["rows"]):
            counters = row.get("counters") or {}
            values = {c["counter"]: c for c in counters.get("changes", [])}
            if row["status"] == "unchanged" or not str(row["case_id"]).startswith("gemm/"):
                continue
            changed.append({"case_id": row["case_id"], "status": row["status"], "change": row["change"],
                            "counters": counters.get("summary"),
                            **{f"{k}_base": values[k]["base"] for k in EXACT if k in values},
                            **{f"{k}_head": values[k]["head"] for k in EXACT if k in values}})
        moved = [c for c in changed if any(c.get(f"{k}_base") != c.get(f"{k}_head") for k in EXACT)]
        report["tiles"] = {"wall_s": tiles["wall_s"], "rows": changed, "changed_cases": len(changed),
                           "counters_moved": len(moved)}
        _save(out, report)

        repeats = [cold_counters]
        for k in (2, 3):
            repeats.append(job(f"repeat-{k}", "base", cases=REPEATED, counters=f"counters-repeat-{k}")[1])
        report["repeated"] = _same(repeats)
        _save(out, report)
    finally:
        farm.stop()
        report["total_s"] = round(time.perf_counter() - started, 1)
        _save(out, report)


if __name__ == "__main__":
    two_step_main(__doc__ or "", build, run, ".gpu/counters")
