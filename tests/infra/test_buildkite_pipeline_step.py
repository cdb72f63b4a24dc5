"""The pipeline's static step (infra/buildkite/pipeline.yml) as a Buildkite agent runs it: its
command in bash, in a checkout at the build's commit, with the pipeline's and the build's
environment; `buildkite-agent pipeline upload` is the test shim, which keeps what was uploaded.
(A pull request's build, paired with its merge base, runs end to end in tests/e2e/test_buildkite_steps.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import buildkite_agent_shim
from tests.helpers.suite_repo import GemmCase, gemm_suite_files, git, make_suite_repo

STATIC_STEP = Path(__file__).resolve().parents[2] / "infra" / "buildkite" / "pipeline.yml"


def _upload(tmp_path: Path, **build_env: str) -> dict[str, Any]:
    repo = make_suite_repo(tmp_path, gemm_suite_files([GemmCase("alpha")]), name="kernels-repo")
    bin_dir = tmp_path / "bin"
    buildkite_agent_shim.install(bin_dir)
    (bin_dir / "benchfarm").write_text(f"#!/bin/sh\nexec {sys.executable} -m pipeline.cli \"$@\"\n")
    (bin_dir / "benchfarm").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BENCHFARM_", "BUILDKITE"))}
    env.update(BENCHFARM_HOME=str(tmp_path / "home"), BUILDKITE="true", BUILDKITE_COMMIT=git(repo, "rev-parse", "HEAD"),
               BUILDKITE_BRANCH="main", BUILDKITE_BUILD_ID="b-1", BUILDKITE_STEP_KEY="upload",
               BUILDKITE_SHIM_ARTIFACTS=str(tmp_path / "artifacts"), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               BENCHFARM_PIPELINE_DEVICE_CLASSES="nvidia-h100-sxm,pixel-8-pro-cpu-big")   # the pipeline's
    env.update(build_env)   # the build's environment wins over the pipeline's, as on Buildkite
    command = yaml.safe_load(STATIC_STEP.read_text())["steps"][0]["command"].replace("$$", "$")
    proc = subprocess.run(["bash", "-e", "-c", command], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    uploaded: dict[str, Any] = yaml.safe_load((tmp_path / "artifacts" / buildkite_agent_shim.UPLOADED).read_text())
    return uploaded


def _commands(document: dict[str, Any], key: str) -> list[str]:
    (step,) = [s for s in document["steps"] if s["key"] == key]
    return list(step["commands"])


def test_a_push_build_runs_every_class_of_the_pipeline_unpaired(tmp_path: Path) -> None:
    """Buildkite sets BUILDKITE_PULL_REQUEST=false on a push: no --pr and no base."""
    document = _upload(tmp_path, BUILDKITE_PULL_REQUEST="false")
    assert [s["key"] for s in document["steps"]] == ["build", "run-nvidia-h100-sxm", "run-pixel-8-pro-cpu-big",
                                                      "report"]
    (build,) = _commands(document, "build")
    assert build.startswith("benchfarm build --commit ")
    run_job = _commands(document, "run-nvidia-h100-sxm")[-1]
    assert "--base-bundle" not in run_job and "--cases" not in run_job and "--kind" not in run_job
    assert "--pr" not in _commands(document, "report")[0]


def test_an_adhoc_build_runs_its_classes_cases_and_kind(tmp_path: Path) -> None:
    """What the service puts in the environment of a build it creates for `benchfarm trigger`."""
    document = _upload(tmp_path, BUILDKITE_PULL_REQUEST="false", BENCHFARM_PIPELINE_DEVICE_CLASSES="cpu-x86_64",
                       BENCHFARM_PIPELINE_CASES="gemm/*", BENCHFARM_PIPELINE_KIND="adhoc")
    assert [s["key"] for s in document["steps"]] == ["build", "run-cpu-x86_64", "report"]
    assert _commands(document, "run-cpu-x86_64")[-1].endswith("--device-class cpu-x86_64 --cases 'gemm/*' --kind adhoc")
