"""The dispatcher under faults, with real processes on loopback: `benchfarm serve` (builder and
reaper threads) and `benchfarm agent` subprocesses, a small IREE suite, 3 s leases, 0.5 s heartbeats.

- an agent killed (SIGKILL) mid-job: the lease expires, the job is requeued and completed by a
  second agent, and the store holds each case's samples once;
- the service killed while the agent runs, and started again after the agent spooled its
  results: the agent keeps re-sending, the results arrive, the job is done;
- a corrupted artifact in the served bundle: the agent refuses the bundle, the job fails with the
  file and both hashes in its reason, nothing is run;
- PostgreSQL, many jobs, three agents claiming at once: each job runs exactly once.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.farm import Farm, slow, wait_for
from tests.helpers.stores import fresh_database
from tests.helpers.suite_repo import GemmCase, gemm_suite_files, make_suite_repo

pytestmark = pytest.mark.e2e

CASES = [GemmCase("alpha", 32, 32, 32), GemmCase("beta", 16, 32, 64)]


@pytest.fixture
def farm(tmp_path: Path) -> Iterator[Farm]:
    repo = make_suite_repo(tmp_path, gemm_suite_files(CASES), name="suite-repo")
    farm = Farm(root=tmp_path, suite=repo / "kernels")
    yield farm
    farm.stop()


def _samples_per_result(farm: Farm, job_id: str) -> list[tuple[int, int]]:
    """(measurement n, samples stored) for each case result of the job."""
    return farm.query(
        "SELECT m.n, length(m.samples) / 8 FROM case_results r "
        "JOIN measurements m ON m.case_result_id = r.id WHERE r.job_id = ?", job_id)


def test_an_agent_killed_mid_job_is_replaced_by_another(farm: Farm) -> None:
    farm.service()
    farm.register_device_class()
    (job_id,) = farm.trigger()["jobs"].values()
    first = farm.agent("agent-a", slow(4))
    try:
        wait_for(lambda: farm.job(job_id)["status"] == "running" and farm.job(job_id)["agent"] == "agent-a", 40,
                 "agent-a to run the job")
        wait_for(lambda: any(e["event"] == "progress" and "timing" in e.get("stage", "") for e in farm.events("agent-a")),
                 20, "agent-a to start timing")
        # the service shows what the job is doing, from the agent's heartbeats
        wait_for(lambda: (farm.job(job_id)["progress"] or "").startswith("timing: round"), 10, "the job's progress")
        assert "/" in farm.job(job_id)["progress"]
        first.kill(signal.SIGKILL)
        farm.agent("agent-b")
        job = wait_for(lambda: (j := farm.job(job_id))["status"] in ("done", "failed") and j, 40, "the job to end")
    except AssertionError:
        raise AssertionError(farm.logs()) from None
    assert job["status"] == "done" and job["agent"] == "agent-b" and job["attempts"] == 2, job
    assert job["progress"] is None   # a finished job is doing nothing
    assert not list(farm.spool("agent-a").glob("*.json"))   # agent-a never got as far as its results
    stored = _samples_per_result(farm, job_id)
    assert len(stored) == len(CASES) and all(n == count and n > 0 for n, count in stored)
    assert farm.query("SELECT COUNT(*) FROM case_results WHERE job_id = ?", job_id) == [(len(CASES),)]


def test_results_arrive_after_a_service_restart(farm: Farm) -> None:
    service = farm.service()
    farm.register_device_class()
    (job_id,) = farm.trigger()["jobs"].values()
    farm.agent("agent-a", slow(1.5))
    try:
        wait_for(lambda: farm.job(job_id)["status"] == "running", 40, "the job to start")
        # "running" comes at the claim, before the bundle is fetched; killed then, the agent has
        # nothing to time and nothing to spool. After bundle_verified it needs the service only to upload.
        wait_for(lambda: any(e["event"] == "bundle_verified" for e in farm.events("agent-a")), 40,
                 "agent-a to fetch and verify the bundle")
        service.kill(signal.SIGKILL)
        wait_for(lambda: list(farm.spool("agent-a").glob("*.json")), 40, "agent-a to spool its results")
        wait_for(lambda: any(e["event"] == "service_unreachable" for e in farm.events("agent-a")), 10,
                 "agent-a to find the service gone")
        assert farm.query("SELECT COUNT(*) FROM case_results WHERE job_id = ?", job_id) == [(0,)]
        farm.service()
        job = wait_for(lambda: (j := farm.job(job_id))["status"] in ("done", "failed") and j, 30, "the job to end")
        wait_for(lambda: not list(farm.spool("agent-a").glob("*.json")), 10, "the spool to empty")
    except AssertionError:
        raise AssertionError(farm.logs()) from None
    assert job["status"] == "done" and job["attempts"] == 1, job
    stored = _samples_per_result(farm, job_id)
    assert len(stored) == len(CASES) and all(n == count and n > 0 for n, count in stored)
    events = [e["event"] for e in farm.events("agent-a")]
    assert events.index("spooled") < events.index("uploaded") < events.index("job_done")


def test_a_corrupted_bundle_is_refused_and_the_job_fails_with_the_reason(farm: Farm) -> None:
    farm.service()
    farm.register_device_class()
    (job_id,) = farm.trigger()["jobs"].values()
    try:
        digest = wait_for(lambda: farm.job(job_id)["bundle_digest"], 60, "the builder to make the bundle")
    except AssertionError:
        raise AssertionError(farm.logs()) from None
    ((bundle_path,),) = farm.query("SELECT path FROM bundles WHERE digest = ?", digest)
    artifact = min((Path(bundle_path) / "artifacts").rglob("*.vmfb"))
    artifact.write_bytes(artifact.read_bytes() + b"tampered")
    farm.agent("agent-a")
    try:
        job = wait_for(lambda: (j := farm.job(job_id))["status"] in ("done", "failed") and j, 40, "the job to end")
    except AssertionError:
        raise AssertionError(farm.logs()) from None
    assert job["status"] == "failed", job
    relative = artifact.relative_to(bundle_path).as_posix()
    assert "bundle refused" in job["error"] and relative in job["error"] and "sha256" in job["error"], job["error"]
    assert farm.query("SELECT COUNT(*) FROM case_results WHERE job_id = ?", job_id) == [(0,)]
    assert not (farm.root / "agent-a" / "agent" / "bundles" / digest).exists()


@pytest.fixture
def postgres_url(tmp_path: Path) -> Iterator[str]:
    with fresh_database("postgresql", tmp_path) as url:
        yield url


def test_agents_claiming_at_once_on_postgresql_run_each_job_once(farm: Farm, postgres_url: str) -> None:
    farm.database_url = postgres_url
    farm.service()
    farm.register_device_class()
    first = farm.trigger()
    try:
        wait_for(lambda: farm.job(next(iter(first["jobs"].values())))["bundle_digest"], 60, "the bundle")
    except AssertionError:
        raise AssertionError(farm.logs()) from None
    job_ids = [next(iter(first["jobs"].values()))] + [next(iter(farm.trigger()["jobs"].values())) for _ in range(11)]
    agents = ["agent-a", "agent-b", "agent-c"]
    for name in agents:
        farm.agent(name)
    try:
        wait_for(lambda: all(farm.job(j)["status"] == "done" for j in job_ids), 50, "every job to be done")
    except AssertionError:
        raise AssertionError(farm.logs()) from None
    claims = [e["job"] for name in agents for e in farm.events(name) if e["event"] == "claimed"]
    assert sorted(claims) == sorted(job_ids)                     # each job claimed once, by one agent
    assert farm.query("SELECT DISTINCT attempts FROM jobs WHERE id = ANY(?)", job_ids) == [(1,)]
    rows = farm.query("SELECT job_id, COUNT(*) FROM case_results WHERE job_id = ANY(?) GROUP BY job_id", job_ids)
    assert sorted(rows) == sorted((j, len(CASES)) for j in job_ids)
    print({name: sum(1 for e in farm.events(name) if e["event"] == "claimed") for name in agents})
