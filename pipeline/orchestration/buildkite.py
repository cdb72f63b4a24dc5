"""The dynamic Buildkite pipeline for one commit, made with buildkite-sdk.

    build (queue benchfarm-builder): benchfarm build -> bundle/head (and bundle/base), uploaded as artifacts
      -> one step per device class (queue benchfarm-<class>): download the bundles, benchfarm run-job
        -> report (after every device step, even failed ones): benchfarm report --commit SHA [--pr N]

Values known when the pipeline is generated (commit, base, pull request, device class) are
written into the commands; what only the running job knows is read from Buildkite's environment
at run time, written `$$NAME` so that `buildkite-agent pipeline upload` does not interpolate it.
`STEP_ENV` lists, per step, the Buildkite variables its commands read.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from buildkite_sdk import CommandStep
from buildkite_sdk.pipeline import Pipeline   # the package re-exports it implicitly

from pipeline.config import PIPELINE_ARGUMENTS, BuildkiteSettings
from pipeline.contracts.ids import DEVICE_CLASS_PATTERN

__all__ = ["BUILD_KEY", "PIPELINE_KINDS", "REPORT_KEY", "STEP_ENV", "PipelineRequest", "build_pipeline", "device_key",
           "render_pipeline"]

PIPELINE_KINDS = ("adhoc", "push", "pr", "nightly")
"""What a pipeline's device steps may record their run as (`benchfarm run-job --kind`)."""
BUILD_KEY = "build"
REPORT_KEY = "report"
_SHA = re.compile(r"^[0-9a-f]{7,64}$")

# The Buildkite variables each kind of step reads at run time (the agent sets them for every job).
STEP_ENV: dict[str, tuple[str, ...]] = {
    # the checkout is at BUILDKITE_COMMIT; the build records which Buildkite build made the bundle
    BUILD_KEY: ("BUILDKITE_COMMIT", "BUILDKITE_BUILD_ID", "BUILDKITE_AGENT_META_DATA_QUEUE"),
    # run-job names its run and job after the Buildkite build and job (idempotent uploads on a
    # retried job), and refuses to run on an agent of another queue
    "device": ("BUILDKITE_COMMIT", "BUILDKITE_BUILD_ID", "BUILDKITE_JOB_ID", "BUILDKITE_RETRY_COUNT",
               "BUILDKITE_AGENT_META_DATA_QUEUE", "BUILDKITE_AGENT_NAME"),
    # the report links back to the Buildkite build; BUILDKITE_PULL_REQUEST is "false" on a push
    REPORT_KEY: ("BUILDKITE_COMMIT", "BUILDKITE_PULL_REQUEST", "BUILDKITE_BUILD_ID", "BUILDKITE_BUILD_URL"),
}

# Lost agents: exit status -1 (the agent stopped answering), 255 (the agent was stopped
# forcefully), signal reason agent_stop (stopped gracefully mid-job).
_AGENT_LOST = ((("exit_status", -1)), (("exit_status", 255)), (("signal_reason", "agent_stop")))


@dataclass(frozen=True)
class PipelineRequest:
    """The arguments of one pipeline upload (`benchfarm pipeline`'s flags)."""

    commit: str
    device_classes: Sequence[str]
    base: str | None = None
    pr: int | None = None
    targets: Sequence[str] | None = None     # the build's targets; None: benchfarm build's default
    repository: str | None = None            # BENCHFARM_REPOSITORY for every step; None: the agents' settings
    cases: str | None = None                 # glob over case ids the device steps run; None: all
    kind: str | None = None                  # what run-job records the run as; None: from the build

    def __post_init__(self) -> None:
        for name, sha in (("commit", self.commit), ("base", self.base)):
            if sha is not None and not _SHA.match(sha):
                raise ValueError(f"{name} {sha!r} is not a commit sha (7 to 64 lowercase hex digits)")
        if not self.device_classes:
            raise ValueError(f"at least one device class is needed (--device-classes, or "
                             f"{PIPELINE_ARGUMENTS['device_classes']} in the pipeline's environment)")
        for dc in self.device_classes:
            if not re.fullmatch(DEVICE_CLASS_PATTERN, dc):
                raise ValueError(f"device class {dc!r} does not match {DEVICE_CLASS_PATTERN}")
        if len(set(self.device_classes)) != len(self.device_classes):
            raise ValueError("a device class is named twice")
        if self.kind is not None and self.kind not in PIPELINE_KINDS:
            raise ValueError(f"kind {self.kind!r} is not one of {', '.join(PIPELINE_KINDS)}")
        if self.pr is not None and self.pr < 1:
            raise ValueError(f"pull request number {self.pr} is not positive")


def device_key(device_class: str) -> str:
    return "run-" + re.sub(r"[^a-zA-Z0-9_-]", "-", device_class)


def _retry(settings: BuildkiteSettings) -> dict[str, object]:
    return {"automatic": [{key: value, "limit": settings.agent_lost_retries} for key, value in _AGENT_LOST],
            "manual": {"permit_on_passed": True}}


def _build_step(request: PipelineRequest, settings: BuildkiteSettings) -> CommandStep:
    targets = f" --targets {shlex.quote(','.join(request.targets))}" if request.targets else ""
    targets += f" --suite {shlex.quote(settings.suite_dir)}" if settings.suite_dir else ""
    bundles = settings.bundle_dir
    commands = [f"benchfarm build --commit {request.commit} --out {bundles}/head{targets}"]
    if request.base:
        commands.append(f"benchfarm build --commit {request.base} --out {bundles}/base{targets}")
    return CommandStep(
        key=BUILD_KEY, label=f":hammer: build {request.commit[:10]}", commands=commands,
        agents={"queue": settings.builder_queue}, artifact_paths=[f"{bundles}/**/*"],
        timeout_in_minutes=settings.build_timeout_min, retry=_retry(settings),
    )


def _device_step(request: PipelineRequest, device_class: str, settings: BuildkiteSettings) -> CommandStep:
    queue = settings.device_queue_prefix + device_class
    bundles = settings.bundle_dir
    run_job = f"benchfarm run-job --bundle {bundles}/head --device-class {device_class}"
    if request.base:
        run_job += f" --base-bundle {bundles}/base"
    if request.cases:
        run_job += f" --cases {shlex.quote(request.cases)}"
    if request.kind:
        run_job += f" --kind {request.kind}"
    return CommandStep(
        key=device_key(device_class), label=f":stopwatch: {device_class}", depends_on=[BUILD_KEY],
        agents={"queue": queue},
        commands=[
            # the queue is what schedules the job on a device of this class; refuse any other agent
            f'test "$$BUILDKITE_AGENT_META_DATA_QUEUE" = {shlex.quote(queue)}',
            f'buildkite-agent artifact download "{bundles}/**/*" . --step {BUILD_KEY}',
            run_job,
        ],
        timeout_in_minutes=settings.run_timeout_min, retry=_retry(settings),
    )


def _report_step(request: PipelineRequest, settings: BuildkiteSettings) -> CommandStep:
    command = f"benchfarm report --commit {request.commit}"
    if request.pr is not None:
        command += f" --pr {request.pr}"
    if request.base:
        command += f" --base {request.base}"
    command += " --device-classes " + ",".join(request.device_classes)
    return CommandStep(
        key=REPORT_KEY, label=":memo: report", depends_on=[device_key(dc) for dc in request.device_classes],
        allow_dependency_failure=True,   # a device that failed still leaves the others' results to report
        agents={"queue": settings.report_queue}, commands=[command],
        timeout_in_minutes=settings.report_timeout_min, retry=_retry(settings),
    )


def build_pipeline(request: PipelineRequest, settings: BuildkiteSettings) -> Pipeline:
    """The steps for one commit: build, one run per device class, report."""
    pipeline = Pipeline()
    # Only real settings go into the environment: benchfarm refuses unknown BENCHFARM_* variables.
    if request.repository:
        pipeline.add_environment_variable("BENCHFARM_REPOSITORY", request.repository)
    pipeline.add_step(_build_step(request, settings))
    for device_class in request.device_classes:
        pipeline.add_step(_device_step(request, device_class, settings))
    pipeline.add_step(_report_step(request, settings))
    return pipeline


def render_pipeline(pipeline: Pipeline, fmt: str = "json") -> str:
    """JSON or YAML, as `buildkite-agent pipeline upload` reads from stdin."""
    if fmt == "json":
        return pipeline.to_json(indent=2) + "\n"
    if fmt == "yaml":
        return pipeline.to_yaml(sort_keys=False, width=1000)
    raise ValueError(f"unknown format {fmt!r}; json or yaml")
