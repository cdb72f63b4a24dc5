"""`benchfarm run-job` as a Buildkite device step runs it: a built bundle, run on this host's CPU,
uploaded to a real service; a retried step (same build, new Buildkite job) continues the same job
and stores nothing twice."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pipeline.contracts.ids import buildkite_job_ids
from tests.helpers.cli_zygote import benchfarm_argv
from tests.helpers.farm import DEVICE_CLASS, FAST, TOKEN, Farm, base_env
from tests.helpers.suite_repo import GemmCase, gemm_suite_files, make_suite_repo

pytestmark = pytest.mark.e2e


def test_run_job_uploads_once_across_retries(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, gemm_suite_files([GemmCase("alpha", 32, 32, 32)]), name="suite-repo")
    farm = Farm(root=tmp_path, suite=repo / "kernels")
    farm.service()
    try:
        env = base_env(tmp_path / "step")
        env.update(FAST, BENCHFARM_AGENT__SERVER_URL=farm.url, BENCHFARM_AGENT__TOKEN=TOKEN,
                   BENCHFARM_AGENT__DEVICE_CLASSES=json.dumps({"cpu-x86_64": DEVICE_CLASS, "cpu-aarch64": DEVICE_CLASS}),
                   BUILDKITE_BUILD_ID="build-42", BUILDKITE_JOB_ID="job-1", BUILDKITE_RETRY_COUNT="0")
        cli = benchfarm_argv()
        built = subprocess.run([*cli, "build", "--suite", str(repo / "kernels"), "--out", str(tmp_path / "out"),
                                "--targets", "llvm-cpu:x86_64"], env=env, cwd=tmp_path, capture_output=True, text=True,
                               timeout=120, check=False)
        assert built.returncode == 0, built.stderr
        (bundle,) = (tmp_path / "out").iterdir()
        outputs = []
        for retry in ("0", "1"):
            env.update(BUILDKITE_JOB_ID=f"job-{retry}", BUILDKITE_RETRY_COUNT=retry)
            proc = subprocess.run([*cli, "run-job", "--bundle", str(bundle), "--device-class", DEVICE_CLASS], env=env,
                                  cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            outputs.append(proc.stdout.split(":")[0])
        assert outputs[0] == outputs[1]           # the same job both times
        (job,) = farm.api("GET", "jobs")
        # the retry found the job done: no second attempt, its upload only duplicates
        assert job["status"] == "done" and job["attempts"] == 1 and job["device_class"] == DEVICE_CLASS
        assert farm.query("SELECT COUNT(*) FROM case_results WHERE job_id = ?", job["id"]) == [(1,)]
        assert farm.query("SELECT kind FROM runs") == [("push",)]   # a Buildkite build of no pull request

        # an ad-hoc build (what the service asks Buildkite for on `benchfarm trigger`): the run and job
        # are the ones the service named when it created the build, recorded as ad-hoc
        env.update(BUILDKITE_BUILD_ID="build-43", BUILDKITE_JOB_ID="job-2", BUILDKITE_RETRY_COUNT="0")
        proc = subprocess.run([*cli, "run-job", "--bundle", str(bundle), "--device-class", DEVICE_CLASS, "--kind",
                               "adhoc"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        run_id, job_id = buildkite_job_ids("build-43", DEVICE_CLASS)
        assert " ".join(proc.stdout.split()).startswith(f"job {job_id} of run {run_id}:"), proc.stdout
        assert farm.query("SELECT kind FROM runs WHERE id = ?", run_id) == [("adhoc",)]
        # a build of the pipeline's schedule (the nightly on Buildkite) is recorded as one
        env.update(BUILDKITE_BUILD_ID="build-44", BUILDKITE_SOURCE="schedule")
        proc = subprocess.run([*cli, "run-job", "--bundle", str(bundle), "--device-class", DEVICE_CLASS], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        nightly, _ = buildkite_job_ids("build-44", DEVICE_CLASS)
        assert farm.query("SELECT kind FROM runs WHERE id = ?", nightly) == [("nightly",)]
    finally:
        farm.stop()


def test_run_job_cases_times_only_the_matching_cases(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, gemm_suite_files([GemmCase("alpha", 32, 32, 32), GemmCase("beta", 32, 64, 32)]),
                           name="suite-repo")
    farm = Farm(root=tmp_path, suite=repo / "kernels")
    farm.service()
    try:
        env = base_env(tmp_path / "step")
        env.update(FAST, BENCHFARM_AGENT__SERVER_URL=farm.url, BENCHFARM_AGENT__TOKEN=TOKEN,
                   BENCHFARM_AGENT__DEVICE_CLASSES=json.dumps({"cpu-x86_64": DEVICE_CLASS, "cpu-aarch64": DEVICE_CLASS}))
        cli = benchfarm_argv()
        built = subprocess.run([*cli, "build", "--suite", str(repo / "kernels"), "--out", str(tmp_path / "out"),
                                "--targets", "llvm-cpu:x86_64"], env=env, cwd=tmp_path, capture_output=True, text=True,
                               timeout=120, check=False)
        assert built.returncode == 0, built.stderr
        (bundle,) = (tmp_path / "out").iterdir()
        step = [*cli, "run-job", "--bundle", str(bundle), "--device-class", DEVICE_CLASS]
        none = subprocess.run([*step, "--cases", "gemm/nothing/*"], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, check=False)
        assert none.returncode != 0 and "select no case" in none.stdout + none.stderr
        proc = subprocess.run([*step, "--cases", "gemm/beta/*"], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "1 results, 1 ok" in proc.stdout and "groups" not in proc.stdout
        stored = farm.query("SELECT c.case_id FROM case_results r JOIN cases c ON r.case_id = c.id")
        assert [row[0].split("/")[1] for row in stored] == ["beta"]
        # one copy of each (alpha 12 KiB, beta 20 KiB of buffers) over a 24 KiB budget, as the CUDA suite on
        # a small GPU: the job is timed in two groups, and says so
        small = {**env, "BENCHFARM_MEASUREMENT__PLACEMENT_TOTAL_BYTES": str(24 << 10)}
        proc = subprocess.run(step, env=small, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "2 results, 2 ok, 0 not ok; timed in 2 groups" in " ".join(proc.stdout.split()), proc.stdout
    finally:
        farm.stop()
