"""`benchfarm agent`: the long-running device agent of the built-in dispatcher.

It discovers this host's devices, maps them to device classes (`agent.device_classes`,
`agent.only_classes`), registers them with the service, and then loops: long-poll a claim for its
devices' classes, fetch and verify the job's bundle, run it, spool the result document on disk,
upload it until the service acknowledges it, and mark the job done. A heartbeat thread renews the
leases of its job, re-discovers devices (reporting those that go away and come back) and learns of
jobs it lost. Anything left in the spool is sent first at start.

The agent's logic sees devices only as `LocalDevice` values from a discovery function and runs
jobs through an executor function taking plain data (`Work`): it does not know whether a device
is local, behind adb or ssh; the executor does (`run_locally` calls `local.run_bundle`). Jobs run
one at a time, so that two measurements on one host never disturb each other.
"""

from __future__ import annotations

import inspect
import logging
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from pipeline import __version__
from pipeline.agents.agent_log import AgentLog
from pipeline.agents.bundle_cache import BundleRefused, fetch_bundle
from pipeline.agents.client import ServiceClient, ServiceError, Unreachable
from pipeline.agents.devices import LocalDevice, discover_local_devices
from pipeline.agents.spool import Spool, SpoolError, Spooled
from pipeline.agents.upload import deliver, resend_command
from pipeline.config import MeasurementSettings, Settings
from pipeline.contracts import BundleManifest, ResultDocument
from pipeline.contracts.ids import selects_case
from pipeline.contracts.rounds import DecisionRule

__all__ = ["DeviceAgent", "JobRefused", "Work", "map_devices", "run_locally", "select_cases"]

ProgressFn = Callable[[str, int, int], None]
log = logging.getLogger(__name__)

DiscoverFn = Callable[[], list[LocalDevice]]


@dataclass(frozen=True)
class Work:
    """One job as the executor gets it: plain data."""

    job_id: str
    run_id: str
    device: LocalDevice
    bundle_dir: Path
    manifest: BundleManifest
    base_bundle_dir: Path | None = None
    base_manifest: BundleManifest | None = None
    time_unchanged: bool = True
    """False for pull requests: binaries equal to the base's are not timed, but a few sentinels"""
    rule: DecisionRule | None = None
    """what a paired case's rounds stop on (`fetch_decision_rule`); None: the defaults"""


ExecuteFn = Callable[[Work, ProgressFn], ResultDocument]


class JobRefused(RuntimeError):
    """The agent cannot run this job; the message is the job's failure reason."""


def run_locally(measurement: MeasurementSettings, check_dir: Path | None = None,
                counter_dir: Path | None = None) -> ExecuteFn:
    """The executor of devices on this host: `local.run_bundle` (paired when the job has a base),
    remembering passed checks in `check_dir` (`check_cache.CheckCache`) and hardware counters in
    `counter_dir` (`counters.CounterCache`) when given."""
    from pipeline.agents.check_cache import CheckCache
    from pipeline.agents.counters import CounterCache
    from pipeline.agents.local import run_bundle

    check_cache = CheckCache(check_dir) if check_dir is not None else None
    counter_cache = CounterCache(counter_dir) if counter_dir is not None else None

    def execute(work: Work, progress: ProgressFn) -> ResultDocument:
        extra: dict[str, Any] = {}
        if work.base_bundle_dir is not None:
            if "base_bundle_dir" not in inspect.signature(run_bundle).parameters:
                raise JobRefused("paired job, but this agent's run_bundle cannot run a base bundle")
            extra = {"base_bundle_dir": work.base_bundle_dir, "base_manifest": work.base_manifest}
        return run_bundle(bundle_dir=work.bundle_dir, manifest=work.manifest, device=work.device, run_id=work.run_id,
                          job_id=work.job_id, settings=measurement, progress=progress, check_cache=check_cache,
                          time_unchanged=work.time_unchanged, rule=work.rule, counter_cache=counter_cache, **extra)

    return execute


def fetch_decision_rule(client: ServiceClient, device_class: str) -> DecisionRule:
    """The thresholds the service will judge a paired job on `device_class` by (its learned noise per
    case), for the rounds to stop on; the defaults from a service too old to say (404)."""
    try:
        body = client.get(f"compare/decision-rule?{urlencode({'device_class': device_class})}")
    except ServiceError as exc:
        if exc.status != 404:
            raise
        log.warning("the service gives no decision rule (%s): rounds stop on the default thresholds", exc)
        return DecisionRule()
    return DecisionRule(max_pvalue=float(body["max_pvalue"]), default_threshold=float(body["default_threshold"]),
                        thresholds={str(k): float(v) for k, v in body["thresholds"].items()},
                        noise_factor=float(body.get("noise_factor", DecisionRule.noise_factor)))


def map_devices(devices: Sequence[LocalDevice], mapping: dict[str, str], only: Sequence[str]) -> list[LocalDevice]:
    """Devices under their configured class names: `mapping` renames a discovered class (an empty
    name leaves its devices out), `only` keeps the listed (renamed) classes."""
    mapped = []
    for device in devices:
        name = mapping.get(device.device_class.name, device.device_class.name)
        if not name or (only and name not in only):
            continue
        if name != device.device_class.name:   # renamed, still reached the same way (a phone keeps its adb transport)
            device = replace(device, device_class=device.device_class.model_copy(update={"name": name}),
                             info=device.info.model_copy(update={"device_class": name}))
        mapped.append(device)
    return mapped


def select_cases(manifest: BundleManifest, device: LocalDevice, glob: str | None) -> BundleManifest:
    """The manifest's entries for the device's targets whose case id matches `glob` (every case
    when None); JobRefused when none does."""
    entries = [e for e in manifest.entries if e.target in device.device_class.targets and selects_case(glob, e.case)]
    if not entries:
        what = f"cases {glob!r}" if glob else "the bundle"
        raise JobRefused(f"{what} select no case for {device.device_class.name} "
                         f"(targets {', '.join(device.device_class.targets)})")
    return manifest.model_copy(update={"entries": entries})


class DeviceAgent:
    def __init__(self, settings: Settings, *, client: ServiceClient | None = None, name: str | None = None,
                 discover: DiscoverFn | None = None, execute: ExecuteFn | None = None,
                 log: AgentLog | None = None) -> None:
        agent = settings.agent
        self.settings = settings
        self.name = name or agent.name or f"benchfarm-agent@{socket.gethostname()}"
        self.server = agent.server_url or settings.public_url
        self.client = client or ServiceClient(
            self.server, agent.token.get_secret_value(), timeout_s=agent.timeout_s, retries=agent.retries,
            backoff_s=agent.backoff_s, backoff_max_s=agent.backoff_max_s)
        # default: this host's CPU and GPUs, and its phones when `phones.enabled`
        self._discover = discover or (lambda: discover_local_devices(settings.phones, settings.agent.gpu_lock_clocks))
        self.execute = execute or run_locally(settings.measurement, settings.agent_dir / "checked",
                                              settings.agent_dir / "counters")
        self.log = log or AgentLog(settings.agent_dir / "agent.log")
        self.spool = Spool(settings.agent_dir / "spool")
        self.cache_dir = settings.agent_dir / "bundles"
        self.stop = threading.Event()
        self.devices: dict[str, LocalDevice] = {}
        self.current: str | None = None
        self._worker: threading.Thread | None = None
        self.lost: set[str] = set()
        self.claim_wait_s = settings.dispatch.claim_wait_s   # the service's, once registration answers
        self._unreachable = False
        self._send_progress = True   # the running job's stage in each heartbeat (a service that refuses it: off)
        self.log.update(agent=self.name, server=self.server)

    # --- devices and the service ---------------------------------------------------------------

    def discover(self) -> dict[str, LocalDevice]:
        found = map_devices(self._discover(), self.settings.agent.device_classes, self.settings.agent.only_classes)
        return {d.info.uid: d for d in found}

    def _show_devices(self) -> None:
        self.log.update(devices={uid: (d.device_class.name, True) for uid, d in self.devices.items()})

    def register(self) -> None:
        body = {"name": self.name, "host": socket.gethostname(), "version": __version__,
                "devices": [{"device_class": d.device_class.model_dump(mode="json"), "info": d.info.model_dump(mode="json")}
                            for d in self.devices.values()]}
        reply = self.client.post("agents", body, idempotent=True)   # create or refresh: a repeat is the same
        self.claim_wait_s = float(reply["claim_wait_s"])
        self.log.event("registered", agent=self.name, server=self.server,
                       devices={uid: d.device_class.name for uid, d in self.devices.items()})

    def _until_reachable(self, what: Callable[[], Any]) -> Any:
        """Call `what` until the service answers (waiting between tries); None when stopped."""
        delay = self.settings.agent.backoff_s or 0.5
        while not self.stop.is_set():
            try:
                result = what()
            except Unreachable as exc:
                if not self._unreachable:
                    self.log.event("service_unreachable", error=str(exc))
                self._unreachable = True
                self.stop.wait(delay)
                delay = min(delay * 2, self.settings.agent.backoff_max_s)
                continue
            if self._unreachable:
                self.log.event("service_reachable")
                self._unreachable = False
            return result
        return None

    def heartbeat_once(self) -> None:
        try:
            fresh = self.discover()
        except Exception as exc:  # noqa: BLE001 - a failing discovery keeps what we had
            self.log.event("discovery_failed", error=str(exc))
            fresh = dict(self.devices)
        for uid in sorted(set(self.devices) - set(fresh)):
            self.log.event("device_gone", uid=uid, device_class=self.devices[uid].device_class.name)
        came = sorted(set(fresh) - set(self.devices))
        for uid in came:
            self.log.event("device_back", uid=uid, device_class=fresh[uid].device_class.name)
        self.devices = fresh
        self._show_devices()
        try:
            if came:
                self.register()
            beat: dict[str, Any] = {"devices": sorted(self.devices), "running": [self.current] if self.current else []}
            if self._send_progress:
                beat["progress"] = self._progress()
            try:
                reply = self.client.post(f"agents/{self.name}/heartbeat", beat, retries=0, idempotent=True)
            except ServiceError as exc:
                if not (exc.status == 422 and "progress" in exc.message and self._send_progress):
                    raise
                # a service older than its agents knows no progress: beat without it from now on
                self._send_progress = False
                self.log.event("progress_not_accepted", error=str(exc))
                reply = self.client.post(f"agents/{self.name}/heartbeat", {k: v for k, v in beat.items() if k != "progress"},
                                         retries=0, idempotent=True)
        except Unreachable as exc:
            if not self._unreachable:
                self.log.event("service_unreachable", error=str(exc))
            self._unreachable = True
            return
        except ServiceError as exc:
            if exc.status == 422 and "unknown agent" in exc.message:
                self.register()
                return
            self.log.event("heartbeat_refused", error=str(exc))
            return
        if self._unreachable:
            self.log.event("service_reachable")
            self._unreachable = False
        for job_id in reply["lost"]:
            if job_id not in self.lost:
                self.lost.add(job_id)
                self.log.event("lease_lost", job=job_id)

    def _progress(self) -> dict[str, str]:
        """The running job's stage as the service shows it: "timing: round 3/8 gemm/... (45/160)"."""
        job, stage = self.current, self.log.state.get("progress")
        if job is None or not stage:
            return {}
        description, done, total = stage
        return {job: (f"{description} ({done}/{total})" if total else description)[:300]}

    def _heartbeats(self) -> None:
        while not self.stop.wait(self.settings.agent.heartbeat_s):
            try:
                self.heartbeat_once()
            except Exception as exc:  # noqa: BLE001 - the heartbeat thread never dies
                self.log.event("heartbeat_failed", error=f"{type(exc).__name__}: {exc}")

    # --- the loop ------------------------------------------------------------------------------

    def run(self, *, max_jobs: int | None = None) -> int:
        """Work until stopped (or `max_jobs` jobs); returns the number of jobs handled."""
        self.devices = self.discover()
        self._show_devices()
        if not self.devices:
            self.log.event("no_devices", mapping=self.settings.agent.device_classes)
        self.log.event("started", agent=self.name, server=self.server, spool=str(self.spool.root))
        for item in self.spool.pending():
            self.log.event("resending", job=item.job_id)
            self.send(item)
        if self._until_reachable(self.register) is None and self.stop.is_set():
            return 0
        beats = threading.Thread(target=self._heartbeats, name="agent-heartbeat", daemon=True)
        beats.start()
        handled = 0
        while not self.stop.is_set() and (max_jobs is None or handled < max_jobs):
            job = self.claim()
            if job is not None:
                self.handle(job)
                handled += 1
        return handled

    def claim(self) -> dict[str, Any] | None:
        idle = [{"uid": uid, "device_class": d.device_class.name} for uid, d in sorted(self.devices.items())]
        if not idle:
            self.stop.wait(self.settings.agent.heartbeat_s)
            return None
        body = {"agent": self.name, "devices": idle}
        # no Idempotency-Key: a repeated claim takes another job, so a 5xx or a lost answer is not resent
        try:
            response = self._until_reachable(lambda: self.client.request(
                "POST", "jobs/claim", json=body, timeout_s=self.claim_wait_s + self.settings.agent.timeout_s))
        except ServiceError as exc:
            if exc.status == 422 and "unknown agent" in exc.message:
                self._until_reachable(self.register)
            else:
                self.log.event("claim_refused", error=str(exc))
                self.stop.wait(self.settings.agent.heartbeat_s)
            return None
        if response is None or response.status_code == 204:
            return None
        job: dict[str, Any] = response.json()
        return job

    def handle(self, job: dict[str, Any]) -> None:
        job_id, uid = job["job_id"], job["device_uid"]
        self.current = job_id
        self.log.update(job=f"{job_id} on {uid} ({job['device_class']})", progress=None)
        self.log.event("claimed", job=job_id, run=job["run_id"], commit=job["commit"], device=uid,
                       attempt=job["attempt"], cases=job["cases"])
        try:
            work = self._prepare(job)
            if work is None:
                self.log.event("abandoned", job=job_id, reason="agent stopping")
                return
            document = self._execute(work)
            if document is None:
                return
            try:
                spooled = self.spool.put(job_id=job_id, agent=self.name, document=document)
            except SpoolError as exc:   # not sent unspooled: an upload must always have its copy on disk
                raise JobRefused(f"{exc}; the job's measurements are not kept: free space there") from None
            # samples: what the store must hold of this job once it is done (none lost, none twice)
            self.log.event("spooled", job=job_id, path=str(spooled.path), results=len(document.results),
                           samples=sum(len(r.samples) for r in document.results))
            self.send(spooled)
        except (JobRefused, BundleRefused) as exc:
            self.fail(job_id, str(exc))
        except Exception as exc:  # noqa: BLE001 - any failure of the job is the job's, with its reason
            self.fail(job_id, f"agent error: {type(exc).__name__}: {exc}")
        finally:
            self.current = None
            self.log.update(job=None, progress=None)

    def _prepare(self, job: dict[str, Any]) -> Work | None:
        """The job's work with its bundles fetched and verified; None when the agent is stopping."""
        device = self.devices.get(job["device_uid"])
        if device is None:
            raise JobRefused(f"device {job['device_uid']} ({job['device_class']}) went away before the job started")
        try:
            # A service that goes away mid-download is waited for, not blamed on the job.
            fetched = self._until_reachable(lambda: fetch_bundle(self.client, job["bundle_digest"], self.cache_dir))
            if fetched is None:
                return None
            bundle_dir, manifest = fetched
            base_dir = base_manifest = None
            if job.get("base_bundle_digest"):
                base = self._until_reachable(
                    lambda: fetch_bundle(self.client, job["base_bundle_digest"], self.cache_dir))
                if base is None:
                    return None
                base_dir, base_manifest = base
        except BundleRefused as exc:
            self.log.event("bundle_refused", job=job["job_id"], error=str(exc))
            raise BundleRefused(f"bundle refused: {exc}") from None
        self.log.event("bundle_verified", job=job["job_id"], digest=job["bundle_digest"], path=str(bundle_dir))
        rule = (self._until_reachable(lambda: fetch_decision_rule(self.client, job["device_class"]))
                if base_dir is not None else None)
        return Work(job_id=job["job_id"], run_id=job["run_id"], device=device, bundle_dir=bundle_dir,
                    manifest=select_cases(manifest, device, job.get("cases")), base_bundle_dir=base_dir,
                    base_manifest=base_manifest, time_unchanged=job.get("kind") != "pr", rule=rule)

    def _execute(self, work: Work) -> ResultDocument | None:
        """Run the job in a worker thread, watching its device and its lease; None: abandoned."""
        outcome: dict[str, Any] = {}

        def target() -> None:
            try:
                outcome["document"] = self.execute(work, self.log.progress)
            except BaseException as exc:  # noqa: BLE001 - handed to the agent's thread
                outcome["error"] = exc

        worker = threading.Thread(target=target, name=f"job-{work.job_id[:8]}", daemon=True)
        worker.start()
        self._worker = worker
        uid = work.device.info.uid
        while worker.is_alive():
            worker.join(0.2)
            if not worker.is_alive():
                break
            if uid not in self.devices:
                raise JobRefused(f"device {uid} ({work.device.device_class.name}) disconnected mid-job")
            if work.job_id in self.lost:
                self.log.event("abandoned", job=work.job_id, reason="lease lost")
                return None
            if self.stop.is_set():
                self.log.event("abandoned", job=work.job_id, reason="agent stopping")
                return None
        if "error" in outcome:
            exc = outcome["error"]
            if isinstance(exc, JobRefused):
                raise exc
            raise JobRefused(f"run failed: {type(exc).__name__}: {exc}")
        document: ResultDocument = outcome["document"]
        return document

    def busy(self) -> bool:
        """A job's worker thread is still running (also after the agent abandoned the job)."""
        return self._worker is not None and self._worker.is_alive()

    def fail(self, job_id: str, reason: str) -> None:
        self.log.event("job_failed", job=job_id, reason=reason)
        try:
            body = {"agent": self.name, "reason": reason}
            self._until_reachable(lambda: self.client.post(f"jobs/{job_id}/fail", body, idempotent=True))
        except ServiceError as exc:
            self.log.event("fail_refused", job=job_id, error=str(exc))

    def send(self, item: Spooled) -> bool:
        """Upload a spooled result document (in chunks, `upload.deliver`) and complete its job, waiting
        out an unreachable service; the spool file goes once every chunk and the completion are
        acknowledged. A refusal (4xx, or 5xx after the client's retries) keeps the document in
        spool/rejected/, fails the job and logs one line saying how to resend it."""
        try:
            delivered = deliver(self.client, item.document, budget_bytes=self.settings.agent.upload_chunk_bytes,
                                post=lambda chunk: self._until_reachable(
                                    lambda: self.client.post_raw("results", chunk, idempotent=True)))
        except InterruptedError:   # stopped while the service was away: the spool keeps it
            return False
        except ServiceError as exc:
            kept = self.spool.reject(item)
            command = resend_command(kept, self.server)
            self.log.event("results_refused", job=item.job_id, error=str(exc), kept=str(kept), resend=command)
            self.fail(item.job_id, f"results refused by the service: {exc.message}; the measurements are kept on "
                                   f"agent {self.name} in {kept}: {command}")
            return False
        self.log.event("uploaded", job=item.job_id, stored=delivered.stored, duplicates=delivered.duplicates,
                       samples=delivered.samples, chunks=delivered.chunks)
        try:
            self._until_reachable(lambda: self.client.post(f"jobs/{item.job_id}/complete", {"agent": item.agent},
                                                          idempotent=True))
        except ServiceError as exc:   # 409: another agent holds the job now; the results are stored anyway
            self.log.event("complete_refused", job=item.job_id, error=str(exc))
        else:
            if self.stop.is_set():
                return False
            self.log.event("job_done", job=item.job_id)
        self.spool.done(item)
        return True


def run_agent(settings: Settings, *, server: str | None = None, token: str | None = None, name: str | None = None,
              max_jobs: int | None = None) -> int:
    """`benchfarm agent`: run until interrupted (or `max_jobs` jobs); returns the jobs handled."""
    import signal

    update: dict[str, Any] = {}
    if server:
        update["server_url"] = server
    if token:
        from pydantic import SecretStr

        update["token"] = SecretStr(token)
    if update:
        settings = settings.model_copy(update={"agent": settings.agent.model_copy(update=update)})
    agent = DeviceAgent(settings, name=name)

    def stop(signum: int, _frame: Any) -> None:
        agent.log.event("stopping", signal=signum)
        agent.stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
    try:
        return agent.run(max_jobs=max_jobs)
    finally:
        agent.log.close()
