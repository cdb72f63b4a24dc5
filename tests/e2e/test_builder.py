"""The builder as a process of its own (the compose file's `builder` service): the service, told not
to build (dispatch.builder=false), leaves a triggered run's build waiting; `benchfarm builder` on the
same store and home builds it, the agent runs the job, and a stop (SIGTERM, as `docker stop` sends)
ends the builder with one line."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.helpers.farm import Farm, wait_for
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
