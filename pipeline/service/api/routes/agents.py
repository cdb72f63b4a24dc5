"""Device agents (agent scope): register with their devices, heartbeat (renews leases, device
presence); the registry is readable by anyone, like the other reads."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from pipeline.contracts import DeviceClass, DeviceInfo
from pipeline.service.api.deps import Principal, SessionDep, SettingsDep, require_scope
from pipeline.service.api.routes._dispatch_errors import dispatch_errors
from pipeline.service.api.schemas import CONFLICT, ERROR_RESPONSES
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.results.store import ingest, queue
from pipeline.results.store.queue import AgentOut, JobHolding

router = APIRouter(route_class=StrictJsonRoute, tags=["agents"], responses=ERROR_RESPONSES)
AgentPrincipal = Annotated[Principal, require_scope("agent")]


class AgentDevice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    device_class: DeviceClass
    info: DeviceInfo


class AgentRegistration(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@:\-]*$")
    host: str = Field("", max_length=200)
    version: str = Field("", max_length=100)
    devices: list[AgentDevice] = Field(default_factory=list)


class Registered(BaseModel):
    name: str
    lease_s: float
    claim_wait_s: float


class Heartbeat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    devices: list[str] = Field(default_factory=list, description="uids of the devices the agent has now")
    running: list[str] = Field(default_factory=list, description="jobs the agent is working on")
    progress: dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=300)]] = Field(
        default_factory=dict, max_length=16,
        description="job id -> what the agent is doing on it now (kept on the jobs it holds: the job's `progress`)")


class HeartbeatReply(BaseModel):
    lost: list[str] = Field(description="jobs of `running` the agent no longer holds: stop working on them")
    lease_s: float


def check_agent_token(session: SessionDep, name: str, principal: Principal) -> None:
    """An agent's later calls come with the token it registered with (or an admin token)."""
    token_name = queue.agent_token(session, name)
    if token_name is not None and token_name != principal.name and not principal.allows("admin"):
        raise HTTPException(403, f"agent {name!r} registered with token {token_name!r}, not {principal.name!r}")


def check_job_holder(job: JobHolding, principal: Principal) -> None:
    """A job leased to (or run by) an agent is written only with the token that agent registered
    with, or an admin token: 403 otherwise. A job no agent holds passes."""
    if job.holder is None or principal.allows("admin"):
        return
    if job.holder_token != principal.name:
        raise HTTPException(403, f"job {job.id} is leased to agent {job.holder!r}, whose token is not {principal.name!r}")


@router.post("/agents", response_model=Registered, responses=CONFLICT, summary="Register an agent and its devices (agent scope)")
def register(body: AgentRegistration, session: SessionDep, settings: SettingsDep, principal: AgentPrincipal) -> Registered:
    check_agent_token(session, body.name, principal)
    with dispatch_errors():
        try:
            queue.register_agent(session, name=body.name, token_name=principal.name, host=body.host,
                                 version=body.version, devices=[(d.device_class, d.info) for d in body.devices],
                                 may_redefine_classes=principal.allows("admin"))
        except ingest.DeviceClassConflict as exc:
            raise HTTPException(409, str(exc)) from None
    return Registered(name=body.name, lease_s=settings.dispatch.lease_s, claim_wait_s=settings.dispatch.claim_wait_s)


@router.post("/agents/{name}/heartbeat", response_model=HeartbeatReply,
             summary="The agent is alive with these devices: renew its jobs' leases (agent scope)")
def heartbeat(name: str, body: Heartbeat, session: SessionDep, settings: SettingsDep,
              principal: AgentPrincipal) -> HeartbeatReply:
    check_agent_token(session, name, principal)
    with dispatch_errors():
        lost = queue.heartbeat(session, agent_name=name, device_uids=body.devices, running=body.running,
                               lease_s=settings.dispatch.lease_s, progress=body.progress)
    return HeartbeatReply(lost=lost, lease_s=settings.dispatch.lease_s)


@router.get("/agents", response_model=list[AgentOut], summary="Agents and their devices, online or not")
def list_agents(session: SessionDep) -> list[AgentOut]:
    return queue.list_agents(session)


__all__ = ["AgentPrincipal", "check_agent_token", "check_job_holder", "router"]
