"""The farm as its pages read it (agents, devices, the queue of each device class, one job's story):
plain data out, a fixed number of queries per page whatever the number of agents or jobs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa
from pydantic import ConfigDict
from sqlalchemy.orm import Session

from pipeline.contracts.ids import CaseId
from pipeline.results.store import queries, queue
from pipeline.results.store.models import (
    Agent,
    BuildRequest,
    Case,
    Device,
    DeviceClassRow,
    Job,
    Series,
)
from pipeline.results.store.queue import DeviceOut, JobRow
from pipeline.results.store.states import JOB_STATUSES

RUNNING_LIMIT = 1000
"""Running jobs read for the devices page: more than a farm has devices."""


class DeviceView(DeviceOut):
    """A device as the devices page shows it: the API's `DeviceOut`, with its host and its job."""

    model_config = ConfigDict(frozen=True)

    host: str
    job: JobRow | None
    """the job running on it now"""


@dataclass(frozen=True)
class AgentView:
    name: str
    host: str
    version: str
    state: str
    registered_at: datetime
    last_heartbeat: datetime
    devices: list[DeviceView]
    running: list[JobRow]


@dataclass
class ClassQueue:
    """The queue of one device class: claimable jobs, jobs waiting for a build, running ones, and
    the devices that can take them."""

    device_class: str
    targets: list[str]
    claimable: int = 0
    building: int = 0
    running: int = 0
    oldest_queued: datetime | None = None
    devices: int = 0
    online: int = 0
    idle: int = 0


@dataclass(frozen=True)
class FarmView:
    agents: list[AgentView]
    queues: list[ClassQueue]


def farm(session: Session) -> FarmView:
    """Every agent with its devices and current jobs, and the queue of each device class that has a
    device or a waiting job."""
    running = queue.list_jobs(session, status="running", limit=RUNNING_LIMIT)
    by_uid = {j.device_uid: j for j in running if j.device_uid}
    devices: dict[int, list[DeviceView]] = {}
    for device, class_name in session.execute(
            sa.select(Device, DeviceClassRow.name).join(DeviceClassRow, Device.device_class_id == DeviceClassRow.id)
            .where(Device.agent_id.is_not(None)).order_by(Device.uid)):
        devices.setdefault(device.agent_id or 0, []).append(DeviceView(
            uid=device.uid, device_class=class_name, name=device.name, host=device.host, online=device.online,
            last_seen=device.last_seen, job=by_uid.get(device.uid)))
    agents = [AgentView(a.name, a.host, a.version, a.state, a.registered_at, a.last_heartbeat, devices.get(a.id, []),
                        [j for j in running if j.agent == a.name])
              for a in session.scalars(sa.select(Agent).order_by(Agent.state.desc(), Agent.name))]

    queues: dict[str, ClassQueue] = {}

    def class_queue(name: str) -> ClassQueue:
        return queues.setdefault(name, ClassQueue(name, []))

    has_bundle = Job.bundle_digest.is_not(None)
    for name, status, bundled, count, oldest in session.execute(
            sa.select(DeviceClassRow.name, Job.status, has_bundle, sa.func.count(), sa.func.min(Job.created_at))
            .join(DeviceClassRow, Job.device_class_id == DeviceClassRow.id)
            .where(Job.status.in_(("queued", "running")))
            .group_by(DeviceClassRow.name, Job.status, has_bundle)):
        q = class_queue(name)
        if status == "running":
            q.running += count
            continue
        if bundled:
            q.claimable += count
        else:
            q.building += count
        q.oldest_queued = min(q.oldest_queued or oldest, oldest)
    for agent in agents:
        for d in agent.devices:
            q = class_queue(d.device_class)
            q.devices += 1
            q.online += d.online and agent.state == "online"
            q.idle += d.online and agent.state == "online" and d.job is None
    if queues:
        for name, targets in session.execute(sa.select(DeviceClassRow.name, DeviceClassRow.targets)
                                             .where(DeviceClassRow.name.in_(list(queues)))):
            queues[name].targets = sorted(targets)
    return FarmView(agents, sorted(queues.values(), key=lambda q: q.device_class))


def job_counts(session: Session) -> dict[str, int]:
    """status -> number of jobs, every status listed."""
    counts = dict.fromkeys(JOB_STATUSES, 0)
    for status, count in session.execute(sa.select(Job.status, sa.func.count()).group_by(Job.status)):
        counts[status] = count
    return counts


@dataclass(frozen=True)
class CaseOutcome:
    case_id: CaseId
    target: str
    status: str
    reason: str | None


@dataclass(frozen=True)
class Event:
    at: datetime
    what: str
    detail: str = ""


@dataclass
class JobDetail:
    job: JobRow
    events: list[Event]
    """what the store knows happened, oldest first (from the job's and its build's timestamps)"""
    case_counts: dict[str, int]
    problems: list[CaseOutcome]
    """the cases that did not pass: wrong results, errors, skips, with their reasons"""
    siblings: list[JobRow] = field(default_factory=list)
    """the other jobs of the run"""
    environment: dict[str, str] = field(default_factory=dict)
    """what the agent's result document said of the job (host, versions, checks, placement budget)"""


def job_detail(session: Session, job_id: str) -> JobDetail | None:
    job = queue.get_job(session, job_id)
    if job is None:
        return None
    events = [Event(job.created_at, "queued", f"on {job.device_class}" + (f", cases {job.cases}" if job.cases else ""))]
    build = session.scalar(sa.select(BuildRequest).where(BuildRequest.run_id == job.run_id))
    if build is not None:
        events.append(Event(build.created_at, "build requested", ", ".join(build.targets)))
        if build.started_at:
            events.append(Event(build.started_at, "build started"))
        if build.finished_at:
            events.append(Event(build.finished_at, f"build {build.status}",
                                build.error or (f"bundle {build.bundle_digest[:12]}" if build.bundle_digest else "")))
    if job.started_at:
        events.append(Event(job.started_at, f"attempt {job.attempts} of {job.max_attempts} started",
                            f"agent {job.agent}" + (f" on {job.device_uid}" if job.device_uid else "")))
    if job.finished_at:
        events.append(Event(job.finished_at, job.status, job.error or ""))
    elif job.error:  # a requeue keeps its reason on the queued job
        events.append(Event(job.started_at or job.created_at, f"now {job.status}", job.error))
    events.sort(key=lambda e: e.at)
    stored = queries.job_results(session, job_id)   # the job exists: found above
    assert stored is not None
    counts: dict[str, int] = {}
    problems = []
    for r in stored.results:
        counts[r.status] = counts.get(r.status, 0) + 1
        if r.status != "ok":
            problems.append(CaseOutcome(r.case_id, r.target, r.status, r.reason))
    siblings = [j for j in queue.list_jobs(session, run_id=job.run_id) if j.id != job_id]
    return JobDetail(job, events, counts, problems, siblings, stored.environment)


def trigger_classes(session: Session) -> list[tuple[str, int]]:
    """(device class, online devices) of every registered device class, most online first."""
    online = sa.func.count(Device.id).filter(Device.online.is_(True), Agent.state == "online")
    rows = session.execute(
        sa.select(DeviceClassRow.name, online)
        .outerjoin(Device, sa.and_(Device.device_class_id == DeviceClassRow.id, Device.agent_id.is_not(None)))
        .outerjoin(Agent, Device.agent_id == Agent.id)
        .group_by(DeviceClassRow.name))
    return sorted(((name, int(n)) for name, n in rows), key=lambda r: (-r[1], r[0]))


FALLBACK_CASES_EXAMPLE = "gemm/*"


def cases_example(session: Session, device_class: str | None) -> str:
    """An example for the form's case filter that selects cases this farm has measured on
    `device_class` (any class when None): its most measured family and dtype, "gemm/*/f32/*";
    `FALLBACK_CASES_EXAMPLE` before any is."""
    count = sa.func.count(Series.id)
    query = (sa.select(Case.family, Case.dtype).join(Series, Series.case_id == Case.id)
             .group_by(Case.family, Case.dtype).order_by(count.desc(), Case.family, Case.dtype).limit(1))
    if device_class:
        query = query.join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id).where(
            DeviceClassRow.name == device_class)
    found = session.execute(query).first()
    return f"{found.family}/*/{found.dtype}/*" if found else FALLBACK_CASES_EXAMPLE


def online_device_classes(session: Session) -> list[str]:
    """The device classes with a device online now, by name."""
    return sorted(set(session.scalars(
        sa.select(DeviceClassRow.name).join(Device, Device.device_class_id == DeviceClassRow.id)
        .where(Device.online.is_(True)))))
