"""The job queue of the built-in dispatcher: agents, device presence, claims, leases, outcomes.

Functions over a Session returning plain documents (`JobRow`, `ClaimedJob`, `AgentOut`); nothing
here commits (the caller owns the transaction, as in `ingest`). A job is *claimable* when it is
queued and has a bundle (`bundle_digest`); a claim moves it to running under a lease that the
claiming agent's heartbeats renew. A lease that expires puts the job back in the queue, up to
`max_attempts` claims, then fails it with the reason.

Concurrent claims:
- PostgreSQL: candidates are read with `SELECT ... FOR UPDATE SKIP LOCKED`, so two claims running
  at once lock different rows and never wait on each other;
- both backends: the claim itself is a compare-and-set (`UPDATE jobs ... WHERE id = :id AND
  status = 'queued'`), and a claim that loses the race tries the next candidate. On SQLite (one
  writer at a time, the embedded mode) that is all it needs: the update takes the database's
  write lock, and the losing claim sees the row no longer queued.

What drives the queue is `pipeline.orchestration.dispatch`: `triggers` (ad-hoc runs, the service's builder, the
reaper, the nightly) and `bisect` (driving a bisection's jobs).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from pipeline.contracts import DeviceClass, DeviceInfo
from pipeline.results.store import ingest
from pipeline.results.store.db import rowcount
from pipeline.results.store.models import (
    Agent,
    BuildRequest,
    Bundle,
    Case,
    CaseResultRow,
    Commit,
    Device,
    DeviceClassRow,
    Job,
    Repository,
    Run,
    utcnow,
)

__all__ = [
    "AgentOut",
    "ClaimedJob",
    "DeviceOut",
    "DispatchError",
    "JobHolding",
    "JobRow",
    "LeaseLost",
    "agent_online",
    "agent_token",
    "bundle_path",
    "claim_job",
    "complete_job",
    "ensure_external_job",
    "extend_leases",
    "fail_job",
    "get_job",
    "heartbeat",
    "job_holding",
    "list_agents",
    "list_jobs",
    "local_owner",
    "mark_silent_agents_offline",
    "reap_orphaned_local_jobs",
    "set_agent_gone",
    "register_agent",
    "requeue_expired",
    "stored_case_targets",
]

CLAIM_CANDIDATES = 8
"""Candidates read per claim on SQLite: enough that a claim losing races still finds a job (PostgreSQL
locks its one candidate and skips the others' instead)."""


class DispatchError(ValueError):
    """A request the queue cannot take (unknown agent or job); the message says which."""


class LeaseLost(DispatchError):
    """The agent no longer holds the job: its lease expired and the job went back to the queue or
    to another agent, or the job already ended."""


class ClaimedJob(BaseModel):
    model_config = ConfigDict(frozen=True)

    job_id: str
    run_id: str
    repository: str
    commit: str
    device_class: str
    device_uid: str
    bundle_digest: str
    base_bundle_digest: str | None
    cases: str | None
    attempt: int
    max_attempts: int
    lease_expires_at: datetime
    kind: str = "adhoc"
    """the run's kind (pr, push, nightly, adhoc, local): pull requests time changed binaries and sentinels only"""


class JobRow(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    run_id: str
    repository: str
    commit: str
    device_class: str
    status: str
    attempts: int
    max_attempts: int
    agent: str | None
    device_uid: str | None
    lease_expires_at: datetime | None
    cases: str | None
    bundle_digest: str | None
    waiting_for: str | None
    progress: str | None = Field(default=None, description="a running job: what its agent is doing now, as its "
                                 "last heartbeat said (stage, and steps done of all)")
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


def _agent(session: Session, name: str) -> Agent:
    agent = session.scalar(sa.select(Agent).where(Agent.name == name))
    if agent is None:
        raise DispatchError(f"agent: unknown agent {name!r}; it registers first (POST /api/v1/agents)")
    return agent


def _job(session: Session, job_id: str) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise DispatchError(f"job_id: unknown job {job_id}")
    return job


# --- agents and devices ----------------------------------------------------------------------


def register_agent(
    session: Session, *, name: str, token_name: str, host: str, version: str,
    devices: Sequence[tuple[DeviceClass, DeviceInfo]], now: datetime | None = None, may_redefine_classes: bool = False,
) -> None:
    """Create or refresh an agent and its devices: listed devices are online and belong to it; its
    devices not listed are offline. Device classes the store lacks are created from what the agent
    reports; one it has with another definition is changed only when `may_redefine_classes` (an
    admin's token), else ingest.DeviceClassConflict."""
    now = now or utcnow()
    agent = session.scalar(sa.select(Agent).where(Agent.name == name))
    if agent is None:
        agent = Agent(name=name, registered_at=now)
        session.add(agent)
    agent.token_name, agent.host, agent.version = token_name, host, version
    agent.state, agent.last_heartbeat = "online", now
    session.flush()
    for device_class, info in devices:
        ingest.ensure_device_class(session, device_class, may_redefine=may_redefine_classes)
        device = ingest.upsert_device(session, info=info)
        device.agent_id = agent.id
    _set_presence(session, agent, [info.uid for _, info in devices], now)


def _set_presence(session: Session, agent: Agent, online_uids: Sequence[str], now: datetime) -> list[str]:
    """Devices of `agent` listed are online (last_seen now), the others offline; returns the uids
    that went offline."""
    went = []
    for device in session.scalars(sa.select(Device).where(Device.agent_id == agent.id)):
        listed = device.uid in online_uids
        if device.online and not listed:
            went.append(device.uid)
        device.online = listed
        if listed:
            device.last_seen = now
    session.flush()
    return went


def heartbeat(
    session: Session, *, agent_name: str, device_uids: Sequence[str], running: Sequence[str], lease_s: float,
    now: datetime | None = None, progress: Mapping[str, str] | None = None,
) -> list[str]:
    """Record that the agent is alive with these devices, renew the leases of the jobs it runs.

    `running`: the jobs the agent believes it runs. Returns those it no longer holds (lease lost:
    requeued, claimed by another agent, or ended), so that it stops working on them. `progress`:
    job id -> what it is doing, kept on the jobs it holds (`Job.progress`).
    """
    now = now or utcnow()
    agent = _agent(session, agent_name)
    agent.state, agent.last_heartbeat = "online", now
    _set_presence(session, agent, device_uids, now)
    held = set(session.scalars(sa.select(Job.id).where(Job.lease_owner == agent_name, Job.status == "running")))
    if held:
        session.execute(sa.update(Job).where(Job.id.in_(held)).values(lease_expires_at=now + timedelta(seconds=lease_s)))
    for job_id, stage in (progress or {}).items():
        if job_id in held:
            session.execute(sa.update(Job).where(Job.id == job_id).values(progress=stage[:300]))
    return [job_id for job_id in running if job_id not in held]


def mark_silent_agents_offline(session: Session, *, silent_s: float, now: datetime | None = None) -> list[str]:
    """Agents without a heartbeat for `silent_s` go offline, and their devices with them."""
    now = now or utcnow()
    silent = list(session.scalars(sa.select(Agent).where(
        Agent.state == "online", Agent.last_heartbeat < now - timedelta(seconds=silent_s))))
    for agent in silent:
        agent.state = "offline"
        _set_presence(session, agent, [], now)
    return [a.name for a in silent]


def set_agent_gone(session: Session, *, name: str, reason: str, token_name: str | None = None,
                   now: datetime | None = None) -> list[str]:
    """An agent known to be gone (its process ended) goes offline with its devices at once, not
    `agent_offline_s` later, and the jobs it held fail with `reason` (no heartbeat will ever renew
    or end them); `token_name` hands the agent's name to another token (the in-process agent of the
    next `benchfarm up`, whose token replaces the one the last process deleted). Returns those jobs."""
    agent = session.scalar(sa.select(Agent).where(Agent.name == name))
    if agent is None:
        return []
    agent.state = "offline"
    if token_name is not None:
        agent.token_name = token_name
    _set_presence(session, agent, [], now or utcnow())
    held = list(session.scalars(sa.select(Job.id).where(Job.status == "running", Job.lease_owner == name)))
    for job_id in held:
        fail_job(session, job_id=job_id, agent_name=name, reason=reason)
    return held


# --- claims and leases -----------------------------------------------------------------------


def claim_job(
    session: Session, *, agent_name: str, devices: Sequence[tuple[str, str]], lease_s: float,
    now: datetime | None = None,
) -> ClaimedJob | None:
    """Claim the oldest claimable job of one of `devices` ((device uid, device class) pairs the
    agent has idle), or None. The job becomes running under a lease of `lease_s` seconds."""
    now = now or utcnow()
    agent = _agent(session, agent_name)
    agent.state, agent.last_heartbeat = "online", now
    by_class: dict[str, str] = {}
    for uid, device_class in devices:
        by_class.setdefault(device_class, uid)
    if not by_class:
        return None
    query = (
        sa.select(Job.id, DeviceClassRow.name)
        .join(DeviceClassRow, Job.device_class_id == DeviceClassRow.id)
        .where(Job.status == "queued", Job.bundle_digest.is_not(None), DeviceClassRow.name.in_(list(by_class)))
        .order_by(Job.created_at, Job.id)
    )
    if session.get_bind().dialect.name == "postgresql":
        # One row, locked: FOR UPDATE holds every row it returns until the claim commits, and SKIP LOCKED
        # hides them from the claims beside it. Eight candidates each left 32 agents claiming at once
        # (bench/load.py) finding nothing in a queue of 33 jobs, and waiting a poll period to look again.
        query = query.limit(1).with_for_update(skip_locked=True, of=Job)
    else:
        query = query.limit(CLAIM_CANDIDATES)
    for job_id, device_class in session.execute(query).all():
        uid = by_class[device_class]
        device_id = session.scalar(sa.select(Device.id).where(Device.uid == uid))
        won = rowcount(session.execute(
            sa.update(Job).where(Job.id == job_id, Job.status == "queued")
            .values(status="running", lease_owner=agent_name, lease_expires_at=now + timedelta(seconds=lease_s),
                    device_id=device_id, progress=None)
            .execution_options(synchronize_session=False)
        ))
        if won != 1:
            continue  # another claim took it between our read and our update
        job = session.get(Job, job_id)
        assert job is not None
        session.refresh(job)
        ingest.set_job_status(session, job_id=job_id, status="running", agent=agent_name)
        run = job.run
        return ClaimedJob(
            job_id=job.id, run_id=run.id, repository=run.repository.name, commit=run.commit.sha,
            device_class=device_class, device_uid=uid, bundle_digest=job.bundle_digest or "",
            base_bundle_digest=job.base_bundle_digest, cases=job.cases, attempt=job.attempts,
            max_attempts=job.max_attempts, lease_expires_at=job.lease_expires_at or now, kind=run.kind,
        )
    return None


def _held_by(job: Job, agent_name: str) -> None:
    """Raise LeaseLost unless `agent_name` may end `job`: it holds the lease, or the job was requeued
    after its lease expired and nobody claimed it since (the agent finished after all)."""
    if job.status == "running" and job.lease_owner == agent_name:
        return
    if job.status == "queued" and job.attempts > 0:
        return
    holder = f"agent {job.lease_owner}" if job.status == "running" else f"status {job.status}"
    raise LeaseLost(f"job {job.id}: agent {agent_name} no longer holds it ({holder})")


def complete_job(session: Session, *, job_id: str, agent_name: str) -> JobRow:
    """The agent finished the job and its results were stored: done. Idempotent for a done job.

    A job failed because the service refused its results may be completed by the agent that ran
    it once `benchfarm resend` delivered them (the failure said how)."""
    job = _job(session, job_id)
    if job.status != "done":
        if not (job.status == "failed" and job.agent == agent_name and job.lease_owner is None):
            _held_by(job, agent_name)
        job.lease_owner, job.lease_expires_at = None, None
        ingest.set_job_status(session, job_id=job_id, status="done", agent=agent_name)
    return _row(session, job_id)


def fail_job(session: Session, *, job_id: str, agent_name: str, reason: str) -> JobRow:
    """The agent could not run the job (bundle refused, device gone, ...): failed with the reason."""
    job = _job(session, job_id)
    if job.status != "failed":
        _held_by(job, agent_name)
        job.lease_owner, job.lease_expires_at = None, None
        ingest.set_job_status(session, job_id=job_id, status="failed", error=reason[:4000], agent=agent_name)
    return _row(session, job_id)


def requeue_expired(session: Session, *, now: datetime | None = None) -> list[tuple[str, str]]:
    """Running jobs whose lease expired: back to the queue while they have attempts left, failed
    otherwise. Returns (job id, new status) pairs."""
    now = now or utcnow()
    query = sa.select(Job).where(Job.status == "running", Job.lease_expires_at < now).order_by(Job.id)
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True, of=Job)
    moved = []
    for job in session.scalars(query).all():
        owner = job.lease_owner or "unknown"
        job.lease_owner, job.lease_expires_at = None, None
        if job.attempts < job.max_attempts:
            ingest.set_job_status(session, job_id=job.id, status="queued",
                                  error=f"lease of agent {owner} expired on attempt {job.attempts}; requeued")
            moved.append((job.id, "queued"))
        else:
            ingest.set_job_status(session, job_id=job.id, status="failed",
                                  error=f"lease expired {job.attempts} times: last agent {owner}")
            moved.append((job.id, "failed"))
    return moved


# --- local jobs: no lease, an owner process ----------------------------------------------------


def _process_start(pid: int) -> str | None:
    """When the process started (clock ticks since boot, /proc/PID/stat field 22), "" where the
    system does not say (no /proc), None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
        try:   # no /proc: whether the pid exists is all there is to know
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""
    except OSError:
        return ""
    # the command name (field 2) is in parentheses and may hold spaces: count from its end
    return stat.rsplit(")", 1)[1].split()[19]


def local_owner() -> str:
    """This process as the owner of the local jobs it runs (`Job.owner`): host, pid and start time."""
    return f"{socket.gethostname()}:{os.getpid()}:{_process_start(os.getpid()) or ''}"


def _owner_alive(owner: str, host: str) -> bool:
    """Whether the owner process of a job still runs; an owner on another host counts as alive (this
    host cannot tell)."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3:   # not `local_owner`'s form: no process of this host can be told to hold it
        return False
    owner_host, pid, start = parts
    if owner_host != host:
        return True
    if not pid.isdigit():
        return False
    found = _process_start(int(pid))
    return found is not None and (found == start or "" in (found, start))


def reap_orphaned_local_jobs(session: Session) -> list[str]:
    """Fail the unfinished jobs of `benchfarm run` processes of this host that are gone (killed
    outright, their machine restarted), and the running jobs without a lease or an owner (kept by a
    `benchfarm run` before owners were recorded): no process will ever end them. Returns their ids.
    `benchfarm run`, `up` and `serve` call it when they start."""
    host = socket.gethostname()
    owned = session.scalars(sa.select(Job).where(Job.status.in_(("queued", "running")), Job.owner.is_not(None))
                            .order_by(Job.id)).all()
    orphans = [(job, f"failed: its process ({job.owner}) ended without finishing it")
               for job in owned if job.owner is not None and not _owner_alive(job.owner, host)]
    unowned = session.scalars(sa.select(Job).where(Job.status == "running", Job.owner.is_(None),
                                                   Job.lease_owner.is_(None), Job.lease_expires_at.is_(None))
                              .order_by(Job.id)).all()
    no_owner = ("failed: running with neither a lease nor an owner process (left by a benchfarm run that "
                "ended without finishing it)")
    orphans += [(job, no_owner) for job in unowned]
    for job, reason in orphans:
        ingest.set_job_status(session, job_id=job.id, status="failed", error=reason)
    return [job.id for job, _ in orphans]


def extend_leases(session: Session, *, lease_s: float, now: datetime | None = None) -> int:
    """Give every running job a full lease from now. The service calls it when it starts, since its
    agents could not heartbeat while it was down."""
    now = now or utcnow()
    return rowcount(session.execute(
        sa.update(Job).where(Job.status == "running", Job.lease_owner.is_not(None))
        .values(lease_expires_at=now + timedelta(seconds=lease_s))
    ))


def ensure_external_job(
    session: Session, *, run_id: str, job_id: str, repository: str, commit_sha: str, kind: str,
    device_class: DeviceClass, agent_name: str, bundle_digest: str | None, base_bundle_digest: str | None = None,
    may_redefine_class: bool = False,
) -> None:
    """A job run outside the queue (a Buildkite step: `benchfarm run-job`), named by the caller so
    that a retried step finds it again: the run and job are created when missing, and the job is
    (re)started under `agent_name` with a lease that never expires (the orchestrator retries). An
    existing device class is not redefined unless `may_redefine_class` (ingest.DeviceClassConflict)."""
    ingest.ensure_device_class(session, device_class, may_redefine=may_redefine_class)
    job = session.get(Job, job_id)
    if job is None:
        run = session.get(Run, run_id)
        if run is None:
            run = ingest.create_run(session, repository=repository, commit_sha=commit_sha, kind=kind,
                                    device_classes=[device_class.name], run_id=run_id)
            job = run.jobs[0]
            session.execute(sa.update(Job).where(Job.id == job.id).values(id=job_id))
            session.expire_all()
        else:
            dc = session.scalar(sa.select(DeviceClassRow).where(DeviceClassRow.name == device_class.name))
            assert dc is not None
            if run.commit.sha != commit_sha or run.repository.name != repository:
                raise DispatchError(f"run_id: run {run_id} is of {run.repository.name} at {run.commit.sha}, not "
                                    f"{repository} at {commit_sha}")
            taken = next((j.id for j in run.jobs if j.device_class_id == dc.id), None)
            if taken is not None:   # a run has one job per device class
                raise DispatchError(f"job_id: run {run_id} has job {taken} on {device_class.name} already, not {job_id}")
            session.add(Job(id=job_id, run_id=run_id, device_class_id=dc.id, status="queued", attempts=0,
                            created_at=utcnow()))
            session.flush()
        job = session.get(Job, job_id)
        assert job is not None
    elif job.run_id != run_id:
        raise DispatchError(f"job_id: job {job_id} belongs to run {job.run_id}, not {run_id}")
    elif job.device_class.name != device_class.name:
        raise DispatchError(f"device_class: job {job_id} runs on {job.device_class.name}, not {device_class.name}")
    if job.status == "done":
        return
    job.bundle_digest, job.base_bundle_digest = bundle_digest, base_bundle_digest
    job.lease_owner, job.lease_expires_at = agent_name, None
    ingest.set_job_status(session, job_id=job_id, status="running", agent=agent_name)


# --- listing ---------------------------------------------------------------------------------


def get_job(session: Session, job_id: str) -> JobRow | None:
    found = list_jobs(session, job_id=job_id, limit=1)
    return found[0] if found else None


def _row(session: Session, job_id: str) -> JobRow:
    """The row of a job known to exist."""
    session.flush()
    found = get_job(session, job_id)
    assert found is not None
    return found


def list_jobs(session: Session, *, status: str | None = None, run_id: str | None = None, job_id: str | None = None,
              device_class: str | None = None, agent: str | None = None, limit: int = 100,
              offset: int = 0) -> list[JobRow]:
    """Newest first (`offset` of them skipped), with what a waiting job waits for (a build, or an
    agent with its device class)."""
    query = (
        sa.select(Job, Run.id, Repository.name, Commit.sha, DeviceClassRow.name, Device.uid, BuildRequest.status)
        .join(Run, Job.run_id == Run.id)
        .join(Repository, Run.repository_id == Repository.id)
        .join(Commit, Run.commit_id == Commit.id)
        .join(DeviceClassRow, Job.device_class_id == DeviceClassRow.id)
        .outerjoin(Device, Job.device_id == Device.id)
        .outerjoin(BuildRequest, BuildRequest.run_id == Run.id)
        .order_by(Job.created_at.desc(), Job.id)
        .limit(limit)
        .offset(offset)
    )
    if status is not None:
        query = query.where(Job.status == status)
    if run_id is not None:
        query = query.where(Job.run_id == run_id)
    if job_id is not None:
        query = query.where(Job.id == job_id)
    if device_class is not None:
        query = query.where(DeviceClassRow.name == device_class)
    if agent is not None:
        query = query.where(Job.agent == agent)
    rows = []
    for job, run_id_, repo, sha, class_name, uid, build_status in session.execute(query).all():
        waiting = None
        if job.status == "queued":
            waiting = f"build ({build_status})" if job.bundle_digest is None else "an agent"
        rows.append(JobRow(
            id=job.id, run_id=run_id_, repository=repo, commit=sha, device_class=class_name, status=job.status,
            attempts=job.attempts, max_attempts=job.max_attempts, agent=job.agent, device_uid=uid,
            lease_expires_at=job.lease_expires_at, cases=job.cases, bundle_digest=job.bundle_digest,
            waiting_for=waiting, progress=job.progress if job.status == "running" else None, error=job.error,
            created_at=job.created_at, started_at=job.started_at,
            finished_at=job.finished_at,
        ))
    return rows


# --- agents, and who may write a job: the API's object-level checks --------------------------


class DeviceOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    uid: str
    device_class: str
    name: str
    online: bool
    last_seen: datetime


class AgentOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    host: str
    version: str
    state: str
    token_name: str
    last_heartbeat: datetime
    devices: list[DeviceOut]


def list_agents(session: Session) -> list[AgentOut]:
    """Every agent by name, with the devices it registered (online or not)."""
    devices: dict[int, list[DeviceOut]] = {}
    rows = session.execute(sa.select(Device, DeviceClassRow.name).join(DeviceClassRow)
                           .where(Device.agent_id.is_not(None)).order_by(Device.uid)).all()
    for device, class_name in rows:
        devices.setdefault(device.agent_id or 0, []).append(DeviceOut(
            uid=device.uid, device_class=class_name, name=device.name, online=device.online, last_seen=device.last_seen))
    return [AgentOut(name=a.name, host=a.host, version=a.version, state=a.state, token_name=a.token_name,
                     last_heartbeat=a.last_heartbeat, devices=devices.get(a.id, []))
            for a in session.scalars(sa.select(Agent).order_by(Agent.name))]


def agent_token(session: Session, name: str) -> str | None:
    """The name of the token the agent registered with; None for an agent the queue does not know."""
    return session.scalar(sa.select(Agent.token_name).where(Agent.name == name))


def agent_online(session: Session, name: str, *, token_name: str) -> bool:
    """Whether the agent is online, registered with that token (this process's, not a dead one's)."""
    return session.scalar(sa.select(Agent.id).where(Agent.name == name, Agent.state == "online",
                                                    Agent.token_name == token_name)) is not None


@dataclass(frozen=True)
class JobHolding:
    """Who holds a job: what the API checks before an agent writes to it."""

    id: str
    status: str
    holder: str | None
    """the agent that holds its lease, else the one that ran it last; None: no agent has had it"""
    holder_token: str | None
    """the token the holder registered with (None: no holder, or one the queue does not know)"""


def job_holding(session: Session, job_id: str) -> JobHolding | None:
    """Who holds the job; None for an unknown job."""
    job = session.get(Job, job_id)
    if job is None:
        return None
    holder = job.lease_owner or job.agent
    return JobHolding(job.id, job.status, holder, agent_token(session, holder) if holder is not None else None)


def stored_case_targets(session: Session, job_id: str) -> set[tuple[str, str]]:
    """(case id as text, target) of every case result the job has stored."""
    return {(str(case_id), target) for case_id, target in session.execute(
        sa.select(Case.case_id, CaseResultRow.target).join(Case, CaseResultRow.case_id == Case.id)
        .where(CaseResultRow.job_id == job_id))}


def bundle_path(session: Session, digest: str) -> str | None:
    """Where the service keeps the bundle with this digest, if it knows it."""
    return session.scalar(sa.select(Bundle.path).where(Bundle.digest == digest))
