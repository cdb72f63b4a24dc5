"""Full-suite paired result documents as an agent sends them (issue 12's shape: 164 CUDA cases,
15,245 head samples each, as many paired base samples, a clock and a temperature per sample), and
the paired job they belong to, started the way `benchfarm run-job` starts one."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np

from pipeline.contracts.arrays import pack
from tests.helpers import factories as f
from tests.helpers.farm import Farm

SUITE_CASES = 164
SAMPLES_PER_CASE = 15_245   # x 164 = 2,500,180 head samples
HEAD, BASE = f.sha("large-head"), f.sha("large-base")
GPU_CLASS = "nvidia-h200"
GPU_TARGET = "cuda:sm_90"


def case_name(i: int) -> str:
    return f"gemm/suite-{i:03d}/4096x4096x4096/bf16/triton"


def manifest(commit: str, cases: int = SUITE_CASES) -> dict[str, Any]:
    entries = [f.built_entry(case_name(i), target=GPU_TARGET) for i in range(cases)]
    return f.manifest(commit, entries).model_dump(mode="json")


def paired_result(i: int, rng: np.random.Generator, samples: int = SAMPLES_PER_CASE, *, target: str = GPU_TARGET,
                  base: str = BASE) -> dict[str, Any]:
    """Case `case_name(i)` ok and paired with `base` (JSON form, packed arrays, as the agent sends
    it): event-timer-like samples (float32 milliseconds), clocks and temperatures."""
    def timings(level: float) -> np.ndarray:
        return rng.lognormal(np.log(level), 0.01, samples).astype(np.float32).astype(np.float64) * 1e-3

    head, base_samples = timings(0.05 + i * 1e-4), timings(0.05 + i * 1e-4)
    stats = {"n": samples, "median": float(np.median(head)), "mean": float(head.mean()),
             "stdev": float(head.std(ddof=1)), "min": float(head.min()), "max": float(head.max())}
    return {
        "case": case_name(i), "target": target, "status": "ok", "stats": stats,
        "samples": pack(head).model_dump(),
        "sample_clocks_mhz": pack(rng.choice([1980.0, 1965.0, 1950.0], samples)).model_dump(),
        "sample_temperatures_c": pack(rng.choice([55.0, 56.0, 57.0], samples)).model_dump(),
        "paired_base": {"commit": base, "samples": pack(base_samples).model_dump()},
        "rounds": [samples // 5] * 4 + [samples - 4 * (samples // 5)],
    }


def start_paired_job(farm: Farm, agent: str, cases: int = SUITE_CASES) -> tuple[str, str]:
    """A paired job of the suite on the GPU class, started the way `benchfarm run-job` starts one
    (the agent must be registered under the farm's token); returns (run id, job id)."""
    run_id, job_id = str(uuid.uuid4()), str(uuid.uuid4())
    farm.api("PUT", f"runs/{run_id}/jobs/{job_id}", json={
        "agent": agent, "repository": f.REPO, "kind": "pr",
        "commit": {"sha": HEAD, "parents": [BASE], "committed_at": datetime.now(UTC).isoformat()},
        "device_class": {"name": GPU_CLASS, "kind": "gpu", "targets": [GPU_TARGET], "runtime": "cuda"},
        "manifest": manifest(HEAD, cases), "base_manifest": manifest(BASE, cases)})
    return run_id, job_id


def paired_document(run_id: str, job_id: str, cases: int = SUITE_CASES, samples: int = SAMPLES_PER_CASE,
                    seed: int = 12, agent: str = "agent-1") -> dict[str, Any]:
    """The job's whole result document (JSON form), every case ok and paired."""
    rng = np.random.default_rng(seed)
    document = f.result_document(run_id=run_id, job_id=job_id, commit_sha=HEAD, results=[],
                                 device_class=GPU_CLASS).model_dump(mode="json")
    document["agent"]["name"] = agent
    document["results"] = [paired_result(i, rng, samples) for i in range(cases)]
    return document
