"""The generated Buildkite pipeline, run locally: the pipeline's static step (infra/buildkite/
pipeline.yml) uploads `benchfarm pipeline`'s steps for a pull request, then each step's commands in dependency order, in a fresh checkout at BUILDKITE_COMMIT, with the
environment variables a Buildkite agent sets for the job; artifacts go through a local folder
(`tests/helpers/buildkite_agent_shim.py`, a `buildkite-agent` on PATH that copies files). The
device step uploads to a real `benchfarm serve`; the report step posts on the GitHub stand-in the
same comment as the webhook path: the slowed case regressed, a failing status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from graphlib import TopologicalSorter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_pr_webhook import (
    CASES,
    GITHUB_TOKEN,
    MEASUREMENT,
    REPO,
    SLOWED,
    github_env,
)
from tests.helpers import buildkite_agent_shim
from tests.helpers.farm import DEVICE_CLASS, TOKEN, Farm, base_env
from tests.helpers.github_standin import github_standin
from tests.helpers.github_webhooks import HostedRepo
from tests.helpers.suite_repo import GemmCase, case_id, gemm_suite_files, git

pytestmark = pytest.mark.e2e

STATIC_STEP = Path(__file__).resolve().parents[2] / "infra" / "buildkite" / "pipeline.yml"


def _ordered(document: dict[str, Any]) -> list[dict[str, Any]]:
    steps = {s["key"]: s for s in document["steps"]}
    return [steps[k] for k in TopologicalSorter({k: set(s.get("depends_on", [])) for k, s in steps.items()})
            .static_order()]


def _agent_env(step: dict[str, Any], commit: str, pr: int, build_id: str) -> dict[str, str]:
    """What a Buildkite agent sets for the step's job."""
    return {"BUILDKITE": "true", "CI": "true", "BUILDKITE_COMMIT": commit, "BUILDKITE_BRANCH": "slow-tile",
            "BUILDKITE_PULL_REQUEST": str(pr), "BUILDKITE_PULL_REQUEST_BASE_BRANCH": "main",
            "BUILDKITE_BUILD_ID": build_id, "BUILDKITE_BUILD_NUMBER": "7",
            "BUILDKITE_BUILD_URL": "https://buildkite.com/acme/benchfarm/builds/7",
            "BUILDKITE_JOB_ID": str(uuid.uuid4()), "BUILDKITE_STEP_KEY": step["key"], "BUILDKITE_RETRY_COUNT": "0",
            "BUILDKITE_AGENT_NAME": f"agent-{step['agents']['queue']}",
            "BUILDKITE_AGENT_META_DATA_QUEUE": step["agents"]["queue"]}


def test_pipeline_steps_run_in_order_and_post_the_comment(tmp_path: Path) -> None:
    hosted = HostedRepo.create(tmp_path / "github", REPO, gemm_suite_files(CASES))
    base = hosted.sha("main")
    slowed = [GemmCase(c.name, c.m, c.n, c.k, "slow" if c == SLOWED else "ok") for c in CASES]
    head = hosted.commit("slow-tile", gemm_suite_files(slowed), "try a 1x8 register tile")
    bin_dir = tmp_path / "bin"
    buildkite_agent_shim.install(bin_dir)
    (bin_dir / "benchfarm").write_text(f"#!/bin/sh\nexec {sys.executable} -m pipeline.cli \"$@\"\n")
    (bin_dir / "benchfarm").chmod(0o755)
    # the pipeline's static step (infra/buildkite/pipeline.yml) as an agent of the builder queue runs
    # it: in a checkout at the head, with the pipeline's environment; it uploads the generated steps
    static = yaml.safe_load(STATIC_STEP.read_text())["steps"][0]
    checkout = tmp_path / "jobs" / "upload"
    git(tmp_path, "clone", "-q", str(hosted.bare), str(checkout))
    git(checkout, "checkout", "-q", head)
    pipeline_env = {"BENCHFARM_PIPELINE_DEVICE_CLASSES": DEVICE_CLASS, "BENCHFARM_BUILDKITE__SUITE_DIR": "kernels",
                    "BENCHFARM_REPOSITORY": REPO}
    env = {**base_env(tmp_path / "pipeline-home"), **pipeline_env, **_agent_env(static | {"key": "upload"}, head, 7,
                                                                              "upload"),
           "BUILDKITE_SHIM_ARTIFACTS": str(tmp_path / "artifacts"), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    uploaded = subprocess.run(["bash", "-e", "-c", static["command"].replace("$$", "$")], cwd=checkout, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
    assert uploaded.returncode == 0, uploaded.stderr
    document = yaml.safe_load((tmp_path / "artifacts" / buildkite_agent_shim.UPLOADED).read_text())
    assert document["env"]["BENCHFARM_REPOSITORY"] == REPO
    (build,) = [s for s in document["steps"] if s["key"] == "build"]
    assert build["commands"][1].startswith(f"benchfarm build --commit {base} ")   # the merge base, paired

    with github_standin() as standin:
        standin.add_token(GITHUB_TOKEN, "benchfarm-bot")
        standin.add_pull(REPO, 7, head, base)
        farm = Farm(root=tmp_path, suite=tmp_path / "unused")
        farm.service()
        build_id = str(uuid.uuid4())
        ran = []
        try:
            for step in _ordered(document):
                checkout = tmp_path / "jobs" / step["key"]
                git(tmp_path, "clone", "-q", str(hosted.bare), str(checkout))
                git(checkout, "checkout", "-q", head)
                env = {**base_env(tmp_path / "homes" / step["key"]), **document.get("env", {}),
                       **_agent_env(step, head, 7, build_id), "BUILDKITE_SHIM_ARTIFACTS": str(tmp_path / "artifacts"),
                       "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "BENCHFARM_BUILD_WORKERS": "2",
                       **MEASUREMENT,
                       "BENCHFARM_AGENT__SERVER_URL": farm.url, "BENCHFARM_AGENT__TOKEN": TOKEN,
                       "BENCHFARM_AGENT__DEVICE_CLASSES": json.dumps({"cpu-x86_64": DEVICE_CLASS,
                                                                      "cpu-aarch64": DEVICE_CLASS}),
                       "BENCHFARM_DATABASE_URL": f"sqlite:///{tmp_path / 'service' / 'benchfarm.db'}",
                       "BENCHFARM_PUBLIC_URL": farm.url, **github_env(standin)}
                # what `buildkite-agent pipeline upload` leaves of `$$NAME`: `$NAME`, read by the job's shell
                script = "\n".join(c.replace("$$", "$") for c in step["commands"])
                proc = subprocess.run(["bash", "-e", "-c", script], cwd=checkout, env=env, capture_output=True,
                                      text=True, timeout=300, check=False)
                assert proc.returncode == 0, f"step {step['key']}:\n{proc.stdout}\n{proc.stderr}"
                for pattern in step.get("artifact_paths", []):   # the agent uploads them after the commands
                    subprocess.run(["buildkite-agent", "artifact", "upload", pattern], cwd=checkout, env=env,
                                   check=True, capture_output=True)
                ran.append(step["key"])
        except BaseException:
            print(farm.logs())
            raise
        finally:
            farm.stop()
        assert ran == ["build", f"run-{DEVICE_CLASS}", "report"]
        (comment,) = standin.comments(REPO, 7)
        regressed = comment["body"].split("Regressed", 1)[1].split("Improved", 1)[0]
        assert case_id(SLOWED).replace("/", "\\/") in regressed or case_id(SLOWED) in regressed, comment["body"]
        assert head[:10] in comment["body"] and base[:10] in comment["body"]
        (status,) = standin.statuses(REPO, head)
        assert status["state"] == "failure"
