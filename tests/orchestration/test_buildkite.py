"""The Buildkite pipeline: valid against Buildkite's published schema, steps in dependency order,
and every Buildkite variable a command reads is one Buildkite sets for that job."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from graphlib import TopologicalSorter
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from buildkite_sdk import Environment

from pipeline import cli
from pipeline.config import BuildkiteSettings, load_settings
from pipeline.orchestration.buildkite import STEP_ENV, PipelineRequest, build_pipeline, render_pipeline

SCHEMA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "buildkite-pipeline-schema.json"
HEAD = "a" * 40
BASE = "b" * 40
CLASSES = ["nvidia-h100-sxm", "pixel-8-pro-gpu"]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith("BENCHFARM_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    if not SCHEMA.is_file():
        pytest.skip(f"needs Buildkite's pipeline schema at {SCHEMA} (shared/data beside the checkout)")
    return json.loads(SCHEMA.read_text())


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert cli.main(["pipeline", *argv]) == 0
    return capsys.readouterr().out


PR_ARGS = ("--commit", HEAD, "--base", BASE, "--pr", "12", "--device-classes", ",".join(CLASSES),
           "--repository", "acme/kernels")
PUSH_ARGS = ("--commit", HEAD, "--device-classes", "nvidia-h100-sxm", "--targets", "cuda:sm_90,llvm-cpu:x86_64")


@pytest.mark.parametrize("args", [PR_ARGS, PUSH_ARGS], ids=["pull-request", "push"])
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_validates_against_buildkites_schema(schema: dict[str, Any], capsys: pytest.CaptureFixture[str],
                                             args: tuple[str, ...], fmt: str) -> None:
    out = _cli(capsys, *args, "--format", fmt)
    document = json.loads(out) if fmt == "json" else yaml.safe_load(out)
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
    assert len(document["steps"]) == 2 + len(args[args.index("--device-classes") + 1].split(","))


def test_the_schema_check_can_fail(schema: dict[str, Any]) -> None:
    document = json.loads(render_pipeline(build_pipeline(PipelineRequest(HEAD, CLASSES), BuildkiteSettings())))
    document["steps"][1]["retry"]["automatic"][0]["signal_reason"] = "agent_lost"   # not a Buildkite reason
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, schema)


def _ordered(document: dict[str, Any]) -> list[dict[str, Any]]:
    steps = {s["key"]: s for s in document["steps"]}
    graph = {key: set(s.get("depends_on", [])) for key, s in steps.items()}
    assert all(dep in steps for deps in graph.values() for dep in deps), "depends_on names an unknown step"
    return [steps[key] for key in TopologicalSorter(graph).static_order()]


def _kind(step: dict[str, Any]) -> str:
    return step["key"] if step["key"] in ("build", "report") else "device"


def _job_env(step: dict[str, Any], pr: int | None) -> dict[str, str]:
    """What a Buildkite agent sets for this step's job (the variables we rely on)."""
    return {"BUILDKITE": "true", "BUILDKITE_COMMIT": HEAD, "BUILDKITE_PULL_REQUEST": str(pr) if pr else "false",
            "BUILDKITE_BUILD_ID": "0190a2b4-1111-4222-8333-444455556666",
            "BUILDKITE_BUILD_URL": "https://buildkite.com/acme/benchfarm/builds/7",
            "BUILDKITE_JOB_ID": "0190a2b4-aaaa-4bbb-8ccc-ddddeeeeffff", "BUILDKITE_RETRY_COUNT": "0",
            "BUILDKITE_AGENT_NAME": "agent-1", "BUILDKITE_AGENT_META_DATA_QUEUE": step["agents"]["queue"],
            "PATH": os.environ["PATH"]}


def test_steps_in_dependency_order_with_the_environment_they_expect(capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(_cli(capsys, *PR_ARGS))
    order = _ordered(document)
    assert [s["key"] for s in order] == ["build", "run-nvidia-h100-sxm", "run-pixel-8-pro-gpu", "report"] or \
        [s["key"] for s in order] == ["build", "run-pixel-8-pro-gpu", "run-nvidia-h100-sxm", "report"]
    build, report = order[0], order[-1]
    assert build["agents"] == {"queue": "benchfarm-builder"} and "depends_on" not in build
    assert build["commands"] == [f"benchfarm build --commit {HEAD} --out bundle/head",
                                 f"benchfarm build --commit {BASE} --out bundle/base"]
    assert build["artifact_paths"] == ["bundle/**/*"]
    for step, dc in zip(sorted(order[1:-1], key=lambda s: s["key"]), CLASSES, strict=True):
        assert step["agents"] == {"queue": f"benchfarm-{dc}"} and step["depends_on"] == ["build"]
        assert step["commands"][-1] == f"benchfarm run-job --bundle bundle/head --device-class {dc} --base-bundle bundle/base"
        assert 'artifact download "bundle/**/*" . --step build' in step["commands"][1]
    assert report["depends_on"] == ["run-nvidia-h100-sxm", "run-pixel-8-pro-gpu"] and report["allow_dependency_failure"]
    assert report["commands"] == [f"benchfarm report --commit {HEAD} --pr 12 --base {BASE} "
                                  "--device-classes nvidia-h100-sxm,pixel-8-pro-gpu"]
    assert document["env"] == {"BENCHFARM_REPOSITORY": "acme/kernels"}

    known = {e.value for e in Environment}
    for step in order:
        assert step["timeout_in_minutes"] > 0
        lost = {(r.get("exit_status"), r.get("signal_reason")) for r in step["retry"]["automatic"]}
        assert lost == {(-1, None), (255, None), (None, "agent_stop")}
        expected = STEP_ENV[_kind(step)]
        assert set(expected) <= known | {"BUILDKITE_AGENT_META_DATA_QUEUE"}, "only variables Buildkite sets"
        assert "BUILDKITE_AGENT_META_DATA_" in known   # the queue tag's variable is this prefix plus QUEUE
        env = _job_env(step, 12)
        assert set(expected) <= set(env)
        for command in step["commands"]:
            # `$$NAME` survives pipeline upload as `$NAME`, read at run time: it must be one we list.
            assert not re.search(r"(?<!\$)\$(?!\$)", command), f"interpolated at upload time: {command}"
            runtime = set(re.findall(r"\$\$\{?([A-Z_]+)", command))
            assert runtime <= set(expected), f"{step['key']} reads {runtime - set(expected)} unlisted"


def test_the_queue_guard_runs_only_on_its_queue(capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(_cli(capsys, *PR_ARGS))
    device = next(s for s in document["steps"] if s["key"] == "run-pixel-8-pro-gpu")
    guard = device["commands"][0].replace("$$", "$")   # what the agent's shell gets after upload
    env = _job_env(device, 12)
    assert subprocess.run(["bash", "-c", guard], env=env).returncode == 0
    env["BUILDKITE_AGENT_META_DATA_QUEUE"] = "benchfarm-nvidia-h100-sxm"
    assert subprocess.run(["bash", "-c", guard], env=env).returncode != 0


def test_benchfarm_commands_parse_with_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(_cli(capsys, *PR_ARGS))
    parser = cli.build_parser()
    commands = [c for s in document["steps"] for c in s["commands"] if c.startswith("benchfarm ")]
    for command in commands:
        argv = shlex.split(command)[1:]
        args = parser.parse_args(argv)
        assert args.func.__name__ == f"cmd_{argv[0].replace('-', '_')}"
    # The pipeline's environment holds only settings benchfarm knows.
    os.environ.update(document["env"])
    try:
        assert load_settings().repository == "acme/kernels"
    finally:
        os.environ.pop("BENCHFARM_REPOSITORY")


def test_push_has_no_base_and_no_pull_request(capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(_cli(capsys, *PUSH_ARGS))
    build, device, report = _ordered(document)
    assert build["commands"] == [f"benchfarm build --commit {HEAD} --out bundle/head --targets cuda:sm_90,llvm-cpu:x86_64"]
    assert device["commands"][-1] == "benchfarm run-job --bundle bundle/head --device-class nvidia-h100-sxm"
    assert report["commands"] == [f"benchfarm report --commit {HEAD} --device-classes nvidia-h100-sxm"]
    assert "env" not in document


def test_settings_shape_the_pipeline() -> None:
    settings = BuildkiteSettings(builder_queue="cpu-big", device_queue_prefix="bf-", run_timeout_min=30,
                                 agent_lost_retries=4, bundle_dir="out")
    document = build_pipeline(PipelineRequest(HEAD, ["h100"]), settings).to_dict()
    build, device, _ = document["steps"]
    assert build["agents"] == {"queue": "cpu-big"} and device["agents"] == {"queue": "bf-h100"}
    assert device["timeout_in_minutes"] == 30 and {r["limit"] for r in device["retry"]["automatic"]} == {4}
    assert build["artifact_paths"] == ["out/**/*"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"commit": "HEAD"}, "is not a commit sha"),
    ({"device_classes": []}, "at least one device class"),
    ({"device_classes": ["h100", "h100"]}, "named twice"),
    ({"device_classes": ["H100; rm -rf /"]}, "does not match"),
    ({"pr": 0}, "not positive"),
    ({"kind": "push; rm -rf /"}, "is not one of adhoc, push, pr, nightly"),   # written into the device steps
])
def test_bad_requests_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PipelineRequest(**{"commit": HEAD, "device_classes": ["h100"], **kwargs})


def test_the_build_environment_gives_the_flags_defaults(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A build's classes, cases and kind are arguments of `benchfarm pipeline`: its flags, else
    BENCHFARM_PIPELINE_* in the build's environment (what the service sets on a build it creates)."""
    monkeypatch.setenv("BENCHFARM_PIPELINE_DEVICE_CLASSES", "cpu-x86_64,nvidia-h100-sxm")
    monkeypatch.setenv("BENCHFARM_PIPELINE_CASES", "gemm/*")
    monkeypatch.setenv("BENCHFARM_PIPELINE_KIND", "adhoc")
    steps = json.loads(_cli(capsys, "--commit", HEAD))["steps"]
    assert [s["key"] for s in steps] == ["build", "run-cpu-x86_64", "run-nvidia-h100-sxm", "report"]
    assert steps[1]["commands"][-1].endswith("--device-class cpu-x86_64 --cases 'gemm/*' --kind adhoc")
    steps = json.loads(_cli(capsys, "--commit", HEAD, "--device-classes", "cpu-x86_64", "--cases", "conv/*",
                            "--kind", "push"))["steps"]   # the flags win
    assert [s["key"] for s in steps] == ["build", "run-cpu-x86_64", "report"]
    assert steps[1]["commands"][-1].endswith("--cases 'conv/*' --kind push")
    monkeypatch.setenv("BENCHFARM_PIPELINE_KIND", "weekly")
    assert cli.main(["pipeline", "--commit", HEAD]) == 1
    assert "kind 'weekly' is not one of adhoc, push, pr, nightly" in capsys.readouterr().err


def test_cli_refuses_a_bad_commit(capsys: pytest.CaptureFixture[str]) -> None:
    # a ref is resolved in the working directory's checkout (the tests run in benchfarm's own)
    assert cli.main(["pipeline", "--commit", "no-such-ref-anywhere", "--device-classes", "h100"]) == 1
    assert "'no-such-ref-anywhere' is not a full commit sha" in capsys.readouterr().err
