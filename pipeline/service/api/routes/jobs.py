"""Jobs of the built-in dispatcher: claim (long poll, agent scope), complete or fail (the lease
holder), list and read (anyone); and ad-hoc runs: POST /runs (user scope) queues a commit's jobs, or
with Buildkite configured creates a Buildkite build that runs them."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from pipeline.config import PIPELINE_ARGUMENTS
from pipeline.contracts import BundleManifest, CommitInfo, DeviceClass
from pipeline.contracts.ids import DEVICE_CLASS_PATTERN, buildkite_job_ids
from pipeline.orchestration.dispatch import triggers
from pipeline.orchestration import buildkite_api
from pipeline.service.api.deps import Principal, SessionDep, SettingsDep, require_scope
from pipeline.service.api.routes._dispatch_errors import dispatch_errors
from pipeline.service.api.routes.agents import (
    AgentPrincipal,
    check_agent_token,
    check_job_holder,
)
from pipeline.service.api.schemas import CONFLICT, ERROR_RESPONSES, ErrorBody
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.results.store import commits, queries, queue
from pipeline.results.store.db import session_scope
from pipeline.results.store.states import JOB_STATUSES

router = APIRouter(route_class=StrictJsonRoute, tags=["jobs"], responses=ERROR_RESPONSES)
UserPrincipal = Annotated[Principal, require_scope("user")]


class IdleDevice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    uid: str = Field(min_length=1)
    device_class: str = Field(pattern=DEVICE_CLASS_PATTERN)


class ClaimRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent: str = Field(min_length=1)
    devices: list[IdleDevice] = Field(description="the agent's idle devices; the job runs on one of them")
    wait_s: float | None = Field(default=None, ge=0, description="longest wait for a job; default dispatch.claim_wait_s")


ClaimedJob = queue.ClaimedJob   # what a claim hands the agent is the dispatcher's record as it is


class JobOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent: str = Field(min_length=1)
    reason: str | None = Field(default=None, description="why the job failed (fail only)")


JobOut = queue.JobRow   # the API's job document is the dispatcher's row, serialised as it is


class TriggerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    repository: str | None = Field(default=None, description="default: the service's repository")
    ref: str | None = Field(default=None, description="a ref of the service's suite checkout (branch, tag, HEAD)")
    commit: str | None = Field(default=None, description="a commit sha (or a unique prefix)")
    device_classes: list[str] = Field(min_length=1)
    cases: str | None = Field(default=None, max_length=400, description="glob over case ids; default: every case")


class TriggerOut(BaseModel):
    run_id: str
    repository: str
    commit: str
    jobs: dict[str, str] = Field(description="device class -> job id")
    bundle_digest: str | None = Field(description="the bundle reused; None: the service builds one first")
    buildkite_build: int | None = Field(default=None, description="with Buildkite configured: the build made for "
                                        "the run (its device steps make the run and jobs named here)")
    buildkite_url: str | None = None


@router.post("/jobs/claim", response_model=ClaimedJob, responses={204: {"description": "no job came in the wait"}},
             summary="Claim a job for one of the agent's idle devices, waiting up to wait_s (agent scope)")
async def claim(body: ClaimRequest, request: Request, session: SessionDep, settings: SettingsDep,
                principal: AgentPrincipal) -> ClaimedJob | Response:
    await run_in_threadpool(check_agent_token, session, body.agent, principal)
    await run_in_threadpool(session.commit)   # end the request's own transaction before waiting
    engine, lease_s = request.app.state.engine, settings.dispatch.lease_s
    devices = [(d.uid, d.device_class) for d in body.devices]

    def once() -> queue.ClaimedJob | None:
        with dispatch_errors(), session_scope(engine) as s:
            queue.requeue_expired(s)
        with dispatch_errors(), session_scope(engine) as s:
            return queue.claim_job(s, agent_name=body.agent, devices=devices, lease_s=lease_s)

    wait_s = settings.dispatch.claim_wait_s if body.wait_s is None else min(body.wait_s, settings.dispatch.claim_wait_s)
    deadline = time.monotonic() + wait_s
    stopping = getattr(request.app.state, "stopping", None)   # set when the service is told to stop
    while True:
        if await request.is_disconnected() or (stopping is not None and stopping.is_set()):
            return Response(status_code=204)
        claimed = await run_in_threadpool(once)
        if claimed is not None:
            return claimed
        if time.monotonic() >= deadline:
            return Response(status_code=204)
        await asyncio.sleep(min(settings.dispatch.claim_poll_s, max(0.0, deadline - time.monotonic())))


@router.post("/jobs/{job_id}/complete", response_model=JobOut, responses=CONFLICT,
             summary="The lease holder finished the job and its results were uploaded (agent scope)")
def complete(job_id: str, body: JobOutcome, session: SessionDep, principal: AgentPrincipal) -> JobOut:
    check_agent_token(session, body.agent, principal)
    with dispatch_errors():
        return queue.complete_job(session, job_id=job_id, agent_name=body.agent)


@router.post("/jobs/{job_id}/fail", response_model=JobOut, responses=CONFLICT,
             summary="The lease holder could not run the job; the reason is kept (agent scope)")
def fail(job_id: str, body: JobOutcome, session: SessionDep, principal: AgentPrincipal) -> JobOut:
    check_agent_token(session, body.agent, principal)
    if not body.reason:
        raise HTTPException(422, "reason: a failed job needs a reason")
    with dispatch_errors():
        return queue.fail_job(session, job_id=job_id, agent_name=body.agent, reason=body.reason)


def _job_out(session: SessionDep, job_id: str) -> JobOut:
    found = queue.get_job(session, job_id)
    if found is None:
        raise HTTPException(404, f"no job {job_id}")
    return found


@router.get("/jobs", response_model=list[JobOut], summary="Jobs, newest first, with their state")
def list_jobs(session: SessionDep, status: str | None = Query(None, description=f"one of {', '.join(JOB_STATUSES)}"),
              run_id: str | None = None, limit: int = Query(100, ge=1, le=1000)) -> list[JobOut]:
    if status is not None and status not in JOB_STATUSES:
        raise HTTPException(422, f"status: {status!r} is not one of {', '.join(JOB_STATUSES)}")
    return queue.list_jobs(session, status=status, run_id=run_id, limit=limit)


@router.get("/jobs/{job_id}", response_model=JobOut, summary="One job and its state")
def get_job(job_id: str, session: SessionDep) -> JobOut:
    return _job_out(session, job_id)


@router.get("/jobs/{job_id}/results", response_model=queries.JobResultsOut, responses={404: {"model": ErrorBody}},
            summary="One job's case results as stored, with the environment each was measured in")
def get_job_results(job_id: str, session: SessionDep) -> queries.JobResultsOut:
    found = queries.job_results(session, job_id)
    if found is None:
        raise HTTPException(404, f"no job {job_id}")
    return found


@router.post("/runs", response_model=TriggerOut, status_code=201,
             summary="Ad-hoc run: a commit (or a ref of the service's checkout) on device classes (user scope)")
def trigger(body: TriggerRequest, session: SessionDep, settings: SettingsDep, principal: UserPrincipal) -> TriggerOut:
    if buildkite_api.configured(settings.buildkite):
        return _trigger_on_buildkite(body, session, settings, principal)
    with dispatch_errors():
        repository, sha = triggers.resolve_commit_for_trigger(session, settings, repository=body.repository,
                                                              ref=body.ref, commit=body.commit)
        result = triggers.queue_run(session, repository=repository, commit_sha=sha, device_classes=body.device_classes,
                                    cases=body.cases, max_attempts=settings.dispatch.max_attempts,
                                    extra_targets=settings.dispatch.build_targets,
                                    can_build=bool(settings.dispatch.suite_path))
    return TriggerOut(run_id=result.run_id, repository=result.repository, commit=result.commit, jobs=result.job_ids,
                      bundle_digest=result.bundle_digest)


def _trigger_on_buildkite(body: TriggerRequest, session: SessionDep, settings: SettingsDep,
                          principal: Principal) -> TriggerOut:
    """The ad-hoc run as a Buildkite build: its environment tells the pipeline step the classes, the
    cases and the kind; the run and job ids are those its run-job steps will use."""
    bad = [dc for dc in body.device_classes if not re.fullmatch(DEVICE_CLASS_PATTERN, dc)]
    if bad:
        raise HTTPException(422, f"device_classes: {bad[0]!r} is not a device class name")
    with dispatch_errors():
        repository, sha = triggers.resolve_commit_for_trigger(session, settings, repository=body.repository,
                                                              ref=body.ref, commit=body.commit)
    default_branch = commits.default_branch(session, repository)
    branch = body.ref if body.ref and body.ref != "HEAD" else default_branch or "main"
    env = {"BENCHFARM_REPOSITORY": repository, PIPELINE_ARGUMENTS["device_classes"]: ",".join(body.device_classes),
           PIPELINE_ARGUMENTS["kind"]: "adhoc"}
    if body.cases:
        env[PIPELINE_ARGUMENTS["cases"]] = body.cases
    try:
        build = buildkite_api.create_build(
            settings.buildkite, commit=sha, branch=branch, env=env, meta_data={"benchfarm-kind": "adhoc"},
            message=f"benchfarm: ad-hoc run of {repository}@{sha[:10]} by {principal.name}")
    except buildkite_api.BuildkiteError as exc:
        raise HTTPException(502, str(exc)) from None
    ids = {dc: buildkite_job_ids(build.id, dc) for dc in body.device_classes}
    return TriggerOut(run_id=next(iter(ids.values()))[0], repository=repository, commit=sha,
                      jobs={dc: job for dc, (_, job) in ids.items()}, bundle_digest=None,
                      buildkite_build=build.number, buildkite_url=build.web_url)


class ExternalJob(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent: str = Field(min_length=1, max_length=200)
    repository: str = Field(min_length=1, max_length=200)
    commit: CommitInfo = Field(description="recorded when the store does not know it")
    kind: str = Field(default="push", description="run kind: pr, push, nightly, adhoc")
    device_class: DeviceClass
    manifest: BundleManifest = Field(description="the bundle's manifest: registers its cases (idempotent)")
    base_manifest: BundleManifest | None = None


ExternalId = Annotated[str, Path(min_length=1, max_length=64, description="the caller's id (at most 64 characters)")]


@router.put("/runs/{run_id}/jobs/{job_id}", response_model=JobOut, responses=CONFLICT,
            summary="Start (or restart) a job run outside the queue under a caller-chosen id (agent scope)",
            description="For orchestrators such as Buildkite: `benchfarm run-job` names the run after the build and "
                        "the job after the build and device class, so a retried step continues the same job.")
def external_job(run_id: ExternalId, job_id: ExternalId, body: ExternalJob, session: SessionDep,
                 principal: AgentPrincipal) -> JobOut:
    from pipeline.results.store import ingest

    # the agent named is this token's (or new), and a job that exists is not another token's agent's
    check_agent_token(session, body.agent, principal)
    existing = queue.job_holding(session, job_id)
    if existing is not None:
        check_job_holder(existing, principal)
    with dispatch_errors():
        try:
            recorded = [body.commit]
            if body.base_manifest is not None:   # the paired base: recorded when the store does not know it
                recorded.append(CommitInfo(sha=body.base_manifest.commit, committed_at=body.base_manifest.created_at or datetime.now(UTC)))
            ingest.record_commits(session, repository=body.repository, commits=recorded)
            digest = ingest.ingest_manifest(session, manifest=body.manifest, path=f"external:{run_id}")
            base = (ingest.ingest_manifest(session, manifest=body.base_manifest, path=f"external:{run_id}")
                    if body.base_manifest is not None else None)
        except ingest.IngestError as exc:
            raise HTTPException(422, str(exc)) from None
        try:
            queue.ensure_external_job(session, run_id=run_id, job_id=job_id, repository=body.repository,
                                      commit_sha=body.commit.sha, kind=body.kind, device_class=body.device_class,
                                      agent_name=body.agent, bundle_digest=digest, base_bundle_digest=base,
                                      may_redefine_class=principal.allows("admin"))
        except ingest.DeviceClassConflict as exc:
            raise HTTPException(409, str(exc)) from None
        if queue.agent_token(session, body.agent) is None:
            # the writer of this job's results: an agent known only from run-job is bound to this token
            queue.register_agent(session, name=body.agent, token_name=principal.name, host="run-job",
                                 version="", devices=[])
    return _job_out(session, job_id)
