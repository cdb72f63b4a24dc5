"""The GPU path through real processes (issue 5): `benchfarm serve` builds a Triton bundle for
cuda:sm_90, a `benchfarm agent` on the GPU host claims the job, fetches the bundle over HTTP,
verifies every sha256, checks and times the kernels on the GPU, and uploads the results.

Runs only where an sm_90 NVIDIA GPU, cuda-python and Triton are present; skips cleanly elsewhere."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.agents.devices import nvidia_devices
from tests.helpers.farm import TOKEN, Farm, Proc, base_env, wait_for
from tests.helpers.suite_repo import make_suite_repo
from tests.helpers.triton_suite import TritonCase, triton_case_id, triton_suite_files

pytestmark = [pytest.mark.gpu, pytest.mark.e2e]

CASES = [TritonCase("alpha", 512, 512, 512), TritonCase("beta", 256, 512, 1024),
         TritonCase("gamma", 256, 256, 256, "wrong")]


def _gpu_class() -> str:
    import importlib.util

    found = [d for d in nvidia_devices() if "cuda:sm_90" in d.device_class.targets]
    if not found:
        pytest.skip("no sm_90 NVIDIA GPU or driver on this host (nvidia-smi found none)")
    if importlib.util.find_spec("cuda.bindings") is None or importlib.util.find_spec("triton") is None:
        pytest.skip("this GPU host lacks cuda-python or Triton")
    return found[0].device_class.name


@pytest.fixture
def farm(tmp_path: Path) -> Iterator[Farm]:
    repo = make_suite_repo(tmp_path, triton_suite_files(CASES), name="suite-repo")
    farm = Farm(root=tmp_path, suite=repo / "kernels", lease_s=30.0)
    yield farm
    farm.stop()


def test_gpu_job_claimed_fetched_verified_run_and_uploaded(farm: Farm) -> None:
    device_class = _gpu_class()
    farm.service()
    env = base_env(farm.root / "gpu-agent")
    env.update(BENCHFARM_AGENT__HEARTBEAT_S="1", BENCHFARM_AGENT__ONLY_CLASSES=json.dumps([device_class]),
               BENCHFARM_MEASUREMENT__MIN_TIME_S="0.05", BENCHFARM_MEASUREMENT__MAX_TIME_S="1",
               BENCHFARM_MEASUREMENT__ROUNDS="2")
    agent = Proc("gpu-agent", ["agent", "--server", farm.url, "--token", TOKEN, "--name", "gpu-agent"], env,
                 farm.root / "gpu-agent.log", farm.root).start()
    farm.procs.append(agent)
    try:
        wait_for(lambda: any(d["device_class"] == device_class for a in farm.api("GET", "agents")
                             for d in a.get("devices", [])), 60, "the agent to register its GPU")
        run = farm.api("POST", "runs", json={"ref": "HEAD", "device_classes": [device_class]})
        (job_id,) = run["jobs"].values()
        job = wait_for(lambda: (j := farm.job(job_id))["status"] in ("done", "failed") and j, 300, "the GPU job")
    except AssertionError:
        raise AssertionError(farm.logs()) from None
    assert job["status"] == "done", (job, farm.logs())
    events = [e["event"] for e in farm.events("gpu-agent")]
    for step in ("claimed", "uploaded", "job_done"):
        assert step in events, (step, events)
    rows = farm.query(
        "SELECT c.case_id, r.status, m.median, m.n, length(m.samples) / 8 "
        "FROM case_results r JOIN cases c ON c.id = r.case_id LEFT JOIN measurements m ON m.case_result_id = r.id "
        "WHERE r.job_id = ?", job_id)
    by_case = {row[0]: row for row in rows}
    for case in CASES:
        case_id, status, median, n, stored = by_case[triton_case_id(case)]
        print(f"{case_id}: {status} median={median} n={n}")
        if case.variant == "ok":
            assert status == "ok" and median and median > 0 and n == stored and n >= 4
        else:
            assert status == "wrong" and median is None
