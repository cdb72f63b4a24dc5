"""The dispatcher under faults, with real processes on loopback: `benchfarm serve` (builder and
reaper threads) and `benchfarm agent` subprocesses, a small IREE suite, 3 s leases, 0.5 s heartbeats.

- an agent killed (SIGKILL) mid-job: the lease expires, the job is requeued and completed by a
  second agent, and the store holds each case's samples once;
- the service killed while the agent runs, and started again after the agent spooled its
  results: the agent keeps re-sending, the results arrive, the job is done;
- a corrupted artifact in the served bundle: the agent refuses the bundle, the job fails with the
  file and both hashes in its reason, nothing is run;
- PostgreSQL, many jobs, three agents claiming at once: each job runs exactly once;
- a PostgreSQL server of the test's own (initdb, pg_ctl) stopped while the agents time and upload,
  started again: the service answers 503 meanwhile, the agents wait it out, every job is done;
- the service SIGKILLed in the middle of an agent's chunked upload of a full-suite paired document,
  then started again: the agent sends the rest, the job is done, every case stored once;
- the agent's spool on a full file system (a tmpfs the test mounts): the job fails saying so, no
  partial file is left, and with space again the next job is done;
- agents whose clocks are an hour ahead of and behind the service's (datefudge on the agent
  processes): leases and jobs go by the service's clock, every job is done once.
Each ends with the same accounting (`_accounted`): every job done, or failed with its reason, and
each done job holding exactly what its agent measured, each case once.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.helpers import pg_server
from tests.helpers.farm import Farm, slow, wait_for
from tests.helpers.full_suite import paired_document, start_paired_job
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
    except AssertionError as exc:   # the agent's events name a job's failure and its reason (CI, once: it failed it)
        raise AssertionError(f"{exc}\n{farm.logs()}\nagent-a's events: {farm.events('agent-a')}") from None
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


# --- the store, the service, the disk and the clock under faults (issue 33) ----------------------


def _ended(farm: Farm, job_ids: Sequence[str]) -> bool:
    return all(farm.job(j)["status"] in ("done", "failed") for j in job_ids)


def _accounted(farm: Farm, job_ids: Sequence[str], agents: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Every job ended: done, or failed with its reason. A done job holds exactly what its agent
    spooled (measured and sent): as many case results, each case once, one measurement per ok
    case, as many samples. Returns the jobs."""
    spooled = {e["job"]: e for name in agents for e in farm.events(name) if e["event"] == "spooled"}
    jobs = {j: farm.job(j) for j in job_ids}
    for job_id, job in jobs.items():
        assert job["status"] in ("done", "failed"), job
        if job["status"] == "failed":
            assert job["error"], job
            continue
        ((results, distinct, ok),) = farm.query(
            "SELECT COUNT(*), COUNT(DISTINCT case_id || ' ' || target), "
            "SUM(CASE WHEN status = 'ok' THEN 1 ELSE 0 END) FROM case_results WHERE job_id = ?", job_id)
        ((measurements, n, stored),) = farm.query(
            "SELECT COUNT(*), COALESCE(SUM(m.n), 0), COALESCE(SUM(length(m.samples)), 0) / 8 FROM measurements m "
            "JOIN case_results r ON r.id = m.case_result_id WHERE r.job_id = ?", job_id)
        sent = spooled[job_id]
        assert results == distinct == sent["results"] and measurements == ok, (job_id, results, distinct, ok, sent)
        assert int(n) == int(stored) == sent["samples"] > 0, (job_id, n, stored, sent)
    return jobs


# A PostgreSQL server of the test's own, taken away mid-ingest


@pytest.fixture
def own_postgres() -> Iterator[pg_server.PgServer]:
    if (reason := pg_server.why_not()) is not None:
        pytest.skip(reason)
    with pg_server.own_server() as server:
        yield server


def test_the_store_restarted_mid_ingest_loses_nothing(farm: Farm, own_postgres: pg_server.PgServer) -> None:
    farm.database_url = own_postgres.url
    farm.lease_s = 60.0   # the outage must not expire the leases: this test is about the store, not the reaper
    service = farm.service()
    farm.register_device_class()
    first = next(iter(farm.trigger()["jobs"].values()))
    agents = ["agent-a", "agent-b"]
    try:
        wait_for(lambda: farm.job(first)["bundle_digest"], 60, "the bundle")
        job_ids = [first] + [next(iter(farm.trigger()["jobs"].values())) for _ in range(3)]
        for name in agents:
            farm.agent(name, slow(1.0))
        wait_for(lambda: all(any(e["event"] == "bundle_verified" for e in farm.events(n)) for n in agents), 60,
                 "both agents to time a job")
        own_postgres.stop("fast")   # the service's connections are cut mid-work
        # the agents finish timing and upload into a service without its store: 503s, waited out
        wait_for(lambda: "store unavailable: POST /api/v1/results" in service.output(), 90,
                 "an upload to meet the store's absence")
        assert all(list(farm.spool(n).glob("*.json")) for n in agents
                   if any(e["event"] == "spooled" for e in farm.events(n)))   # kept on the agents meanwhile
        assert not any(e["event"] in ("results_refused", "job_failed") for n in agents for e in farm.events(n))
        api, page = requests.get(f"{farm.url}/api/v1/jobs", timeout=30), requests.get(f"{farm.url}/", timeout=30)
        assert api.status_code == 503 and api.headers["retry-after"] and "store is not available" in api.json()["error"]
        assert page.status_code == 503 and "store is not available" in page.text   # the page says so too
        own_postgres.start()
        wait_for(lambda: _ended(farm, job_ids), 180, "every job to end")
        jobs = _accounted(farm, job_ids, agents)
    except AssertionError:
        raise AssertionError(farm.logs()) from None
    assert all(j["status"] == "done" and j["attempts"] == 1 for j in jobs.values()), jobs
    assert not any(list(farm.spool(n).glob("*.json")) for n in agents)


# The service killed in the middle of a chunked upload


def test_the_service_killed_mid_chunked_upload_gets_the_rest_once(tmp_path: Path) -> None:
    farm = Farm(root=tmp_path, suite=tmp_path, lease_s=120)
    cases, samples = 48, 15_245   # ~9 MiB packed: 10 chunks of at most 1 MiB
    try:
        service = farm.service()
        farm.api("POST", "agents", json={"name": "agent-a", "devices": []})   # agent-a's name, under the farm's token
        run_id, job_id = start_paired_job(farm, "agent-a", cases)
        # agent-a measured the job and spooled it before it (was) stopped: at its next start it delivers it first
        spool = farm.spool("agent-a")
        spool.mkdir(parents=True)
        document = paired_document(run_id, job_id, cases, samples, agent="agent-a")
        (spool / f"{job_id}.json").write_text(json.dumps({"job_id": job_id, "agent": "agent-a", "document": document}))
        agent = farm.agent("agent-a", {"BENCHFARM_AGENT__UPLOAD_CHUNK_BYTES": str(1 << 20)})

        def stored() -> int:
            return int(farm.query("SELECT COUNT(*) FROM case_results WHERE job_id = ?", job_id)[0][0])

        def kill_mid_upload() -> bool:
            if not 0 < stored() < cases:
                return False
            service.kill(signal.SIGKILL)
            return True

        wait_for(kill_mid_upload, 120, "the first chunks to be stored", period_s=0.02)
        at_kill = stored()
        assert 0 < at_kill < cases, at_kill   # some chunks in, the rest not: mid-upload
        wait_for(lambda: any(e["event"] == "service_unreachable" for e in farm.events("agent-a")), 60,
                 "the agent to find the service gone")
        assert agent.alive() and stored() == at_kill
        farm.service()
        job = wait_for(lambda: (j := farm.job(job_id))["status"] in ("done", "failed") and j, 120, "the job to end")
        wait_for(lambda: not list(spool.glob("*.json")), 30, "the spool to empty")
    except AssertionError:
        raise AssertionError(farm.logs()) from None
    finally:
        farm.stop()
    assert job["status"] == "done", job
    ((results, distinct),) = farm.query("SELECT COUNT(*), COUNT(DISTINCT case_id) FROM case_results WHERE job_id = ?",
                                        job_id)
    ((n, head, paired),) = farm.query(
        "SELECT SUM(m.n), SUM(length(m.samples)) / 8, SUM(length(r.paired_samples)) / 8 FROM case_results r "
        "JOIN measurements m ON m.case_result_id = r.id WHERE r.job_id = ?", job_id)
    assert results == distinct == cases, (results, distinct)
    assert int(n) == int(head) == int(paired) == cases * samples
    (uploaded,) = [e for e in farm.events("agent-a") if e["event"] == "uploaded"]
    # the chunks stored before the kill count as stored once; a chunk whose answer the kill cut is a duplicate
    assert uploaded["stored"] + uploaded["duplicates"] == cases and uploaded["stored"] >= cases - at_kill, uploaded
    events = [e["event"] for e in farm.events("agent-a")]
    assert events.index("resending") < events.index("service_unreachable") < events.index("uploaded") \
        < events.index("job_done")


# The agent's spool on a full file system


@contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[None]:
    """A tmpfs of `size` mounted on `path` (skips the test where the machine cannot mount one)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root here (CI runs as root)")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"this machine cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def _fill(folder: Path) -> Path:
    """Write a file until the file system says it is full; returns it."""
    filler = folder / "filler"
    with filler.open("wb", buffering=0) as out:   # unbuffered: nothing left to flush at close
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def test_a_full_spool_fails_the_job_with_the_reason_and_leaves_nothing_half_written(farm: Farm) -> None:
    spool = farm.spool("agent-a")
    with _tmpfs(spool, "256k"):
        filler = _fill(spool)
        farm.service()
        farm.register_device_class()
        (full,) = farm.trigger()["jobs"].values()
        farm.agent("agent-a")
        try:
            job = wait_for(lambda: (j := farm.job(full))["status"] in ("done", "failed") and j, 90, "the job to end")
            assert job["status"] == "failed", job
            assert f"spool {spool}" in job["error"] and "No space left on device" in job["error"], job["error"]
            assert sorted(p.name for p in spool.iterdir()) == ["filler"]   # no partial document left behind
            assert farm.query("SELECT COUNT(*) FROM case_results WHERE job_id = ?", full) == [(0,)]
            filler.unlink()   # space again: the next job is spooled, sent and done
            (second,) = farm.trigger()["jobs"].values()
            wait_for(lambda: _ended(farm, [second]), 90, "the next job to end")
            jobs = _accounted(farm, [full, second], ["agent-a"])
        except AssertionError:
            raise AssertionError(farm.logs()) from None
        finally:
            farm.stop()
    assert jobs[second]["status"] == "done", jobs[second]
    failed = [e for e in farm.events("agent-a") if e["event"] == "job_failed"]
    assert [e["job"] for e in failed] == [full]


# The agents' clocks an hour off the service's


def _datefudge() -> str | None:
    """Debian's datefudge: an LD_PRELOAD library that moves the wall clock (time, gettimeofday,
    clock_gettime(CLOCK_REALTIME)) by DATEFUDGE seconds (back; negative: ahead) and leaves the
    monotonic clock, which sleeps and timeouts use, alone: a host whose clock is set wrong.
    (libfaketime 0.9.10 also offsets the deadline of Python's time.sleep, which then fails with EINVAL.)"""
    found = sorted(glob.glob("/usr/lib/*/datefudge/datefudge.so"))
    return found[0] if found else None


def test_agents_an_hour_off_the_services_clock_run_each_job_once(farm: Farm) -> None:
    library = _datefudge()
    if library is None:
        pytest.skip("needs datefudge (apt-get install datefudge; `bash infra/local.sh test` installs it)")
    offsets = {"agent-ahead": 3600, "agent-behind": -3600}
    farm.service()
    farm.register_device_class()
    first = next(iter(farm.trigger()["jobs"].values()))
    try:
        wait_for(lambda: farm.job(first)["bundle_digest"], 60, "the bundle")
        job_ids = [first] + [next(iter(farm.trigger()["jobs"].values())) for _ in range(3)]
        started = datetime.now(UTC)
        for name, offset in offsets.items():
            farm.agent(name, {"LD_PRELOAD": library, "DATEFUDGE": str(-offset)})   # the agent's wall clock only
        wait_for(lambda: _ended(farm, job_ids), 120, "every job to end")
        ended = datetime.now(UTC)
        jobs = _accounted(farm, job_ids, list(offsets))
    except AssertionError:
        raise AssertionError(farm.logs()) from None
    for name, offset in offsets.items():   # the agents did run an hour off: their own log says so
        first_event = datetime.fromisoformat(farm.events(name)[0]["ts"])
        assert abs((first_event - started).total_seconds() - offset) < 300, (name, first_event, started)
    assert all(j["status"] == "done" and j["attempts"] == 1 for j in jobs.values()), \
        ([(j["status"], j["attempts"], j["agent"], j["error"]) for j in jobs.values()], farm.logs())
    claims = [e["job"] for name in offsets for e in farm.events(name) if e["event"] == "claimed"]
    assert sorted(claims) == sorted(job_ids)   # no lease taken for expired by a clock: each job claimed once
    for job in jobs.values():   # the store's times are the service's
        for moment in (job["started_at"], job["finished_at"]):
            when = datetime.fromisoformat(moment)
            when = when if when.tzinfo else when.replace(tzinfo=UTC)
            assert started.timestamp() - 5 <= when.timestamp() <= ended.timestamp() + 5, (job, started, ended)
