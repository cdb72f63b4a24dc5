"""The builder as a process of its own (the compose file's `builder` service): the service, told not
to build (dispatch.builder=false), leaves a triggered run's build waiting; `benchfarm builder` on the
same store and home builds it, the agent runs the job, and a stop (SIGTERM, as `docker stop` sends)
ends the builder with one line. A builder on a host where a CPU device is being timed waits for it."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.helpers.farm import Farm, wait_for
from tests.helpers.host_lock import Holder
from tests.helpers.suite_repo import GemmCase, gemm_suite_files, make_suite_repo
from tests.helpers.stores import database_url  # noqa: F401  (the fixture: SQLite and PostgreSQL)

pytestmark = pytest.mark.e2e


def test_a_builder_process_builds_what_the_service_leaves(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    repo = make_suite_repo(tmp_path, gemm_suite_files([GemmCase("alpha", 16, 16, 16)]), name="suite-repo")
    farm = Farm(root=tmp_path, suite=repo / "kernels",
                database_url="" if database_url.startswith("sqlite") else database_url)
    try:
        farm.service({"BENCHFARM_DISPATCH__BUILDER": "false"})
        farm.register_device_class()
        run = farm.trigger()
        (job_id,) = run["jobs"].values()
        assert run["bundle_digest"] is None   # a build is requested
        farm.agent("agent-1")
        time.sleep(3)
        assert farm.query("SELECT status FROM build_requests") == [("pending",)]   # the service did not build it
        builder = farm.builder()
        job = wait_for(lambda: (j := farm.job(job_id))["status"] in ("done", "failed") and j, 120, "the job to end")
        assert job["status"] == "done", (job, farm.logs())
        assert farm.query("SELECT status FROM build_requests") == [("done",)]
        builder.kill(signal.SIGTERM)
        assert builder.proc is not None and builder.proc.returncode == 130, farm.logs()
        last = builder.output().strip().splitlines()[-1]
        assert last == "benchfarm builder: interrupted: stopped (SIGTERM)", builder.output()
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{farm.logs()}") from None
    finally:
        farm.stop()


def test_a_builder_waits_while_a_cpu_device_of_its_host_is_timed(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, gemm_suite_files([GemmCase("alpha", 16, 16, 16)]), name="suite-repo")
    farm = Farm(root=tmp_path, suite=repo / "kernels")
    lock = tmp_path / "host.lock"
    timing = Holder("cpu_timing", lock)   # another process times on this host's CPU
    try:
        farm.service({"BENCHFARM_DISPATCH__BUILDER": "false"})
        farm.register_device_class()
        (job_id,) = farm.trigger()["jobs"].values()
        builder = farm.builder({"BENCHFARM_MEASUREMENT__HOST_LOCK": str(lock)})
        wait_for(lambda: "waiting for CPU timing on this host" in builder.output(), 60, "the builder to wait")
        assert f"pid {timing.proc.pid}" in builder.output()
        time.sleep(2)
        assert farm.query("SELECT status FROM build_requests") == [("building",)]   # taken, not compiled
        timing.release()
        wait_for(lambda: farm.query("SELECT status FROM build_requests") == [("done",)], 120, "the build")
        _the_job_runs(farm, job_id, lock)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{farm.logs()}") from None
    finally:
        timing.release_if_held()
        farm.stop()


def test_a_build_whose_builder_died_is_built_by_the_next_one(tmp_path: Path) -> None:
    """A builder killed outright (SIGKILL, the OOM killer, a reboot) cannot put its build back: the
    service's reaper does, once the build's heartbeat is older than the lease, and the next builder
    builds it; the run's job then runs."""
    repo = make_suite_repo(tmp_path, gemm_suite_files([GemmCase("alpha", 16, 16, 16)]), name="suite-repo")
    farm = Farm(root=tmp_path, suite=repo / "kernels")
    lock = tmp_path / "host.lock"
    lease = {"BENCHFARM_DISPATCH__LEASE_S": "3", "BENCHFARM_MEASUREMENT__HOST_LOCK": str(lock)}
    timing = Holder("cpu_timing", lock)   # holds the first builder inside its build until it is killed
    try:
        farm.service({"BENCHFARM_DISPATCH__BUILDER": "false", **lease})
        farm.register_device_class()
        (job_id,) = farm.trigger()["jobs"].values()
        first = farm.builder(lease)
        wait_for(lambda: "waiting for CPU timing on this host" in first.output(), 60, "the first builder to build")
        first.kill(signal.SIGKILL)
        timing.release()
        time.sleep(4)   # past the lease
        farm.builder(lease)
        wait_for(lambda: farm.query("SELECT status FROM build_requests") == [("done",)], 120, "the build")
        assert "queued again" in farm.logs()
        _the_job_runs(farm, job_id, lock)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{farm.logs()}") from None
    finally:
        timing.release_if_held()
        farm.stop()


def _the_job_runs(farm: Farm, job_id: str, lock: Path) -> None:
    farm.agent("agent-1", {"BENCHFARM_MEASUREMENT__HOST_LOCK": str(lock)})
    job = wait_for(lambda: (j := farm.job(job_id))["status"] in ("done", "failed") and j, 120, "the job to end")
    assert job["status"] == "done", job
