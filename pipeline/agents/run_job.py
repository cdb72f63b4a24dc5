"""`benchfarm run-job`: one Buildkite device step. Runs a downloaded bundle (and its base, paired)
on this host's device of the class, and uploads the results to the service like an agent does:
spooled first, re-sent until acknowledged.

Ids come from Buildkite's environment so that a retried step continues the same job and its
upload is idempotent: the run is named after BUILDKITE_BUILD_ID, the job after the build and the
device class (a retry gets a new BUILDKITE_JOB_ID but is the same job; BUILDKITE_RETRY_COUNT is
logged). Outside Buildkite, fresh ids.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.agents.agent import (
    DeviceAgent,
    JobRefused,
    Work,
    fetch_decision_rule,
    map_devices,
    run_locally,
    select_cases,
)
from pipeline.agents.agent_log import AgentLog
from pipeline.agents.devices import discover_local_devices
from pipeline.agents.upload import resend_command
from pipeline.config import Settings
from pipeline.contracts import CommitInfo
from pipeline.contracts.bundle_dir import MANIFEST, load_bundle
from pipeline.contracts.ids import buildkite_job_ids

__all__ = ["RunJobError", "bundle_folder", "job_ids", "run_job"]

class RunJobError(RuntimeError):
    pass


def job_ids(env: Mapping[str, str], device_class: str) -> tuple[str, str]:
    """(run id, job id): stable per Buildkite build (and device class), fresh outside Buildkite."""
    build = env.get("BUILDKITE_BUILD_ID")
    if not build:
        return str(uuid.uuid4()), str(uuid.uuid4())
    return buildkite_job_ids(build, device_class)


def _kind(env: Mapping[str, str]) -> str:
    """The run's kind from the Buildkite build: a pull request's, a schedule's (the nightly), a push's."""
    pr = env.get("BUILDKITE_PULL_REQUEST", "false")
    if pr not in ("", "false"):
        return "pr"
    if not env.get("BUILDKITE_BUILD_ID"):
        return "adhoc"
    return "nightly" if env.get("BUILDKITE_SOURCE") == "schedule" else "push"


def bundle_folder(path: Path) -> Path:
    """The bundle at `path`: the folder itself when it holds a manifest, else its one subfolder
    that does (`benchfarm build --out DIR` builds into DIR/<bundle name>, and a Buildkite step
    downloads DIR whole)."""
    path = Path(path)
    if (path / MANIFEST).is_file():
        return path
    found = sorted(p for p in path.iterdir() if (p / MANIFEST).is_file()) if path.is_dir() else []
    if len(found) != 1:
        raise RunJobError(f"{path}: {'no bundle' if not found else f'{len(found)} bundles'} "
                          f"(a folder with {MANIFEST}, or a folder holding exactly one)")
    return found[0]


def run_job(settings: Settings, *, bundle: Path, device_class: str, base_bundle: Path | None = None,
            env: Mapping[str, str] | None = None, cases: str | None = None, kind: str | None = None) -> dict[str, Any]:
    """Run the bundle (paired with `base_bundle` when given) on this host's device of the class and
    upload the results; `cases` (a glob over case ids) runs only the cases it matches; `kind`: what
    the run is recorded as (default: from the Buildkite build)."""
    env = os.environ if env is None else env
    bundle = bundle_folder(bundle)
    base_bundle = bundle_folder(base_bundle) if base_bundle is not None else None
    manifest = load_bundle(bundle)
    base_manifest = load_bundle(base_bundle) if base_bundle is not None else None
    kind = kind or _kind(env)
    devices = map_devices(discover_local_devices(gpu_lock=settings.agent.gpu_lock_clocks), settings.agent.device_classes,
                          settings.agent.only_classes)
    device = next((d for d in devices if d.device_class.name == device_class), None)
    if device is None:
        have = ", ".join(sorted({d.device_class.name for d in devices})) or "none"
        raise RunJobError(f"no device of class {device_class} on this host (it has: {have})")
    try:
        timed = select_cases(manifest, device, cases) if cases else manifest
    except JobRefused as refused:
        raise RunJobError(str(refused)) from None
    run_id, job_id = job_ids(env, device_class)
    name = env.get("BUILDKITE_AGENT_NAME") or settings.agent.name or f"benchfarm-run-job@{socket.gethostname()}"
    agent = DeviceAgent(settings, name=name, discover=lambda: [device],
                        log=AgentLog(settings.agent_dir / "agent.log"))
    try:
        agent.log.event("run_job", run=run_id, job=job_id, retry=env.get("BUILDKITE_RETRY_COUNT", "0"),
                        device=device.info.uid, bundle=str(bundle))
        for item in agent.spool.pending():   # a previous attempt on this host that could not upload
            agent.send(item)
        commit = CommitInfo(sha=manifest.commit, committed_at=manifest.created_at or datetime.now(UTC))
        agent.client.request("PUT", f"runs/{run_id}/jobs/{job_id}", json={
            "agent": name, "repository": manifest.repository, "commit": commit.model_dump(mode="json"),
            "kind": kind, "device_class": device.device_class.model_dump(mode="json"),
            "manifest": manifest.model_dump(mode="json"),
            "base_manifest": base_manifest.model_dump(mode="json") if base_manifest else None})
        rule = fetch_decision_rule(agent.client, device_class) if base_manifest is not None else None
        work = Work(job_id=job_id, run_id=run_id, device=device, bundle_dir=bundle, manifest=timed,
                    base_bundle_dir=base_bundle, base_manifest=base_manifest, time_unchanged=kind != "pr", rule=rule)
        document = run_locally(settings.measurement, settings.agent_dir / "checked",
                               settings.agent_dir / "counters")(work, agent.log.progress)
        spooled = agent.spool.put(job_id=job_id, agent=name, document=document)
        if not agent.send(spooled):
            rejected = agent.spool.rejected / spooled.path.name
            kept = rejected if rejected.exists() else spooled.path
            raise RunJobError(f"results of job {job_id} not accepted; kept in {kept}: "
                              f"{resend_command(kept, agent.server)}")
        statuses = [r.status for r in document.results]
        return {"run_id": run_id, "job_id": job_id, "results": len(statuses),
                "ok": statuses.count("ok"), "not_ok": len(statuses) - statuses.count("ok"),
                "timing_groups": int(document.environment.get("timing_groups", "1"))}
    finally:
        agent.log.close()
