"""The device agent against a real service on loopback (in-process server, SQLite store), with
fake discovery and a fake executor at its seam: device mapping, a device that goes away mid-job,
the spool re-sent at start, the bundle endpoints' confinement and the client's retries."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests
from pydantic import SecretStr
from sqlalchemy import Engine

from pipeline.agents.agent import DeviceAgent, Work, map_devices
from pipeline.agents.agent_log import AgentLog
from pipeline.agents.client import ServiceClient, Unreachable
from pipeline.agents.devices import LocalDevice
from pipeline.config import Settings, load_settings
from pipeline.contracts import CaseResult, DeviceClass, DeviceInfo, ResultDocument
from pipeline.contracts.result import AgentInfo
from pipeline.orchestration.dispatch import triggers
from pipeline.service.app import create_app
from pipeline.results.store import ingest
from pipeline.results.store.db import session_scope
from tests.helpers.live_server import live_server
from tests.helpers.stores import open_migrated
from tests.helpers import factories as f

TOKEN = "bf_agent_test_token"
ARTIFACT = "artifacts/gemm.vmfb"


def _manifest():  # type: ignore[no-untyped-def]
    entry = f.built_entry(f.GEMM)
    assert entry.artifact is not None
    artifact = entry.artifact.model_copy(update={"path": ARTIFACT, "size_bytes": 6,
                                                 "sha256": hashlib.sha256(b"module").hexdigest()})
    return f.manifest(f.sha(0), [entry.model_copy(update={"artifact": artifact})])


def _device(uid: str = "cpu-1", name: str = f.DEVICE_CLASS) -> LocalDevice:
    cls = DeviceClass(name=name, kind="cpu", targets=[f.TARGET], runtime="iree", hal_driver="local-sync")
    return LocalDevice(cls, DeviceInfo(device_class=name, uid=uid, name="fake cpu"))


@dataclass
class Service:
    url: str
    engine: Engine
    settings: Settings
    bundle: Path


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    settings = load_settings(home=tmp_path / "service", api_token=SecretStr(TOKEN))
    settings = settings.model_copy(update={"dispatch": settings.dispatch.model_copy(
        update={"claim_wait_s": 1.0, "claim_poll_s": 0.05, "lease_s": 5.0})})
    engine = open_migrated(settings.database_url)
    bundle = tmp_path / "bundle"
    manifest = _manifest()
    artifact = bundle / ARTIFACT
    artifact.parent.mkdir(parents=True)
    artifact.write_bytes(b"module")
    (bundle / "manifest.json").write_text(manifest.model_dump_json())
    with session_scope(engine) as s:
        ingest.record_commits(s, repository=f.REPO, commits=[f.commit(0)])
        ingest.upsert_device_class(s, f.device_class())
        ingest.ingest_manifest(s, manifest=manifest, path=str(bundle))
    with live_server(create_app(settings, engine)) as url:
        yield Service(url, engine, settings, bundle)
    engine.dispose()


def _agent(service: Service, tmp_path: Path, discover, execute) -> DeviceAgent:  # type: ignore[no-untyped-def]
    settings = service.settings.model_copy(update={
        "home": tmp_path / "agent-home",
        "agent": service.settings.agent.model_copy(update={
            "server_url": service.url, "token": SecretStr(TOKEN), "heartbeat_s": 0.1, "retries": 0,
            "backoff_s": 0.05, "backoff_max_s": 0.2})})
    return DeviceAgent(settings, name="a1", discover=discover, execute=execute,
                       log=AgentLog(tmp_path / "agent.log", terminal=False, stream=open("/dev/null", "w")))


def _document(work: Work) -> ResultDocument:
    now = datetime.now(UTC)
    return ResultDocument(run_id=work.run_id, job_id=work.job_id, repository=work.manifest.repository,
                          commit=work.manifest.commit, device=work.device.info, agent=AgentInfo(name="a1", version="t"),
                          started_at=now, finished_at=now,
                          results=[CaseResult(case=e.case, target=e.target, status="skipped", reason="fake")
                                   for e in work.manifest.entries])


def _queue(service: Service) -> str:
    with session_scope(service.engine) as s:
        result = triggers.queue_run(s, repository=f.REPO, commit_sha=f.sha(0), device_classes=[f.DEVICE_CLASS],
                                    cases=None, max_attempts=2)
    assert result.bundle_digest is not None   # the known bundle is reused, no build
    return result.job_ids[f.DEVICE_CLASS]


def _job(service: Service, job_id: str) -> dict:  # type: ignore[type-arg]
    return requests.get(f"{service.url}/api/v1/jobs/{job_id}", timeout=5).json()


def test_map_devices_renames_and_limits_classes() -> None:
    devices = [_device("c", "cpu-x86_64"), _device("g", "nvidia-h100")]
    assert [(d.device_class.name, d.info.device_class) for d in map_devices(devices, {"cpu-x86_64": "box"}, [])] == [
        ("box", "box"), ("nvidia-h100", "nvidia-h100")]
    assert [d.info.uid for d in map_devices(devices, {"nvidia-h100": ""}, [])] == ["c"]
    assert [d.info.uid for d in map_devices(devices, {}, ["nvidia-h100"])] == ["g"]


def test_a_job_runs_and_its_results_are_stored(service: Service, tmp_path: Path) -> None:
    job_id = _queue(service)
    agent = _agent(service, tmp_path, lambda: [_device()], lambda work, progress: _document(work))
    assert agent.run(max_jobs=1) == 1
    agent.stop.set()
    job = _job(service, job_id)
    assert job["status"] == "done" and job["agent"] == "a1" and job["device_uid"] == "cpu-1"
    assert not list(agent.spool.root.glob("*.json"))


def test_a_device_gone_mid_job_fails_the_job(service: Service, tmp_path: Path) -> None:
    job_id = _queue(service)
    present = [_device()]
    started, unplugged = threading.Event(), threading.Event()

    def execute(work: Work, progress) -> ResultDocument:  # type: ignore[no-untyped-def]
        started.set()
        unplugged.wait(60)               # the job runs until the agent has given it up
        return _document(work)

    agent = _agent(service, tmp_path, lambda: list(present), execute)
    runner = threading.Thread(target=agent.run, kwargs={"max_jobs": 1})
    runner.start()
    assert started.wait(60)
    present.clear()                      # the phone was unplugged
    runner.join(60)
    unplugged.set()
    assert not runner.is_alive()
    job = _job(service, job_id)
    assert job["status"] == "failed" and job["error"] == f"device cpu-1 ({f.DEVICE_CLASS}) disconnected mid-job"
    events = [line for line in (tmp_path / "agent.log").read_text().splitlines() if '"device_gone"' in line]
    assert events


def test_the_spool_is_sent_at_start(service: Service, tmp_path: Path) -> None:
    job_id = _queue(service)
    first = _agent(service, tmp_path, lambda: [_device()], lambda work, progress: _document(work))
    first.send = lambda item: False      # type: ignore[method-assign]  # "crashed" right after spooling
    first.run(max_jobs=1)
    assert [p.stem for p in first.spool.root.glob("*.json")] == [job_id]
    second = _agent(service, tmp_path, lambda: [_device()], lambda work, progress: _document(work))
    second.run(max_jobs=0)                # only the start: re-send the spool, claim nothing
    second.stop.set()
    assert _job(service, job_id)["status"] == "done"
    assert not list(second.spool.root.glob("*.json"))


def test_cases_glob_selecting_nothing_fails_the_job(service: Service, tmp_path: Path) -> None:
    with session_scope(service.engine) as s:
        result = triggers.queue_run(s, repository=f.REPO, commit_sha=f.sha(0), device_classes=[f.DEVICE_CLASS],
                                    cases="conv/*", max_attempts=2)
    agent = _agent(service, tmp_path, lambda: [_device()], lambda work, progress: _document(work))
    agent.run(max_jobs=1)
    job = _job(service, result.job_ids[f.DEVICE_CLASS])
    assert job["status"] == "failed" and "cases 'conv/*' select no case" in job["error"]


def test_bundle_files_stay_inside_the_bundle(service: Service) -> None:
    digest = ingest.bundle_digest(_manifest())
    auth = {"Authorization": f"Bearer {TOKEN}"}
    listing = requests.get(f"{service.url}/api/v1/bundles/{digest}/manifest", headers=auth, timeout=5).json()
    assert {f["path"] for f in listing["files"]} == {"manifest.json", "artifacts/gemm.vmfb"}
    ok = requests.get(f"{service.url}/api/v1/bundles/{digest}/files/artifacts/gemm.vmfb", headers=auth, timeout=5)
    assert ok.status_code == 200 and ok.content == b"module"
    for path in ("../agent-home/x", "%2e%2e/%2e%2e/etc/passwd", "artifacts/../../bundle/manifest.json"):
        response = requests.get(f"{service.url}/api/v1/bundles/{digest}/files/{path}", headers=auth, timeout=5)
        assert response.status_code == 404, path
    assert requests.get(f"{service.url}/api/v1/bundles/{digest}/manifest", timeout=5).status_code in (401, 403)


def test_claim_without_a_job_answers_204_after_the_wait(service: Service) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    requests.post(f"{service.url}/api/v1/agents", headers=auth, timeout=5, json={"name": "a9", "devices": []})
    started = time.monotonic()
    response = requests.post(f"{service.url}/api/v1/jobs/claim", headers=auth, timeout=10, json={
        "agent": "a9", "devices": [{"uid": "x", "device_class": f.DEVICE_CLASS}], "wait_s": 0.5})
    assert response.status_code == 204 and 0.4 < time.monotonic() - started < 3


def test_the_client_retries_then_says_unreachable() -> None:
    waits: list[float] = []
    client = ServiceClient("http://127.0.0.1:9", "t", timeout_s=1, retries=3, backoff_s=0.5, backoff_max_s=1,
                           sleep=waits.append)
    with pytest.raises(Unreachable, match="after 4 attempts"):
        client.get("jobs")
    assert waits == [0.5, 1, 1]


def test_trigger_and_jobs_commands(service: Service, capsys: pytest.CaptureFixture[str]) -> None:
    from pipeline import cli

    flags = ["--server", service.url, "--token", TOKEN]
    assert cli.main(["trigger", "--commit", f.sha(0)[:12], "--device-class", f.DEVICE_CLASS, "--cases", "gemm/*",
                     *flags]) == 0
    out = capsys.readouterr().out
    assert f"{f.REPO}@{f.sha(0)[:10]} queued (bundle " in out and f"on {f.DEVICE_CLASS}" in out
    assert cli.main(["jobs", *flags]) == 0
    assert "queued (waiting for an agent)" in capsys.readouterr().out
    assert cli.main(["trigger", "--ref", "main", "--device-class", f.DEVICE_CLASS, *flags]) == 1
    assert "no suite checkout" in capsys.readouterr().err


class _OlderService(threading.Thread):
    """Stands in for a service of an earlier version in front of the real one (HTTP on loopback): it
    answers a heartbeat that carries `progress` as such a service did, 422 naming the extra field, and
    forwards every other request to the real service unchanged."""

    def __init__(self, upstream: str) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.upstream, self.refused, self.plain_beats = upstream, 0, 0
        self.beaten = threading.Event()   # three heartbeats forwarded (without progress)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.endswith("/heartbeat") and b'"progress"' in body:
                    outer.refused += 1
                    self._answer(422, b'{"error":"invalid request","errors":[{"field":"body.progress",'
                                      b'"reason":"Extra inputs are not permitted"}]}', "application/json")
                    return
                if self.path.endswith("/heartbeat"):
                    outer.plain_beats += 1
                    if outer.plain_beats >= 3:
                        outer.beaten.set()
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                reply = requests.request(self.command, outer.upstream + self.path, data=body, headers=headers, timeout=30)
                self._answer(reply.status_code, reply.content, reply.headers.get("Content-Type", "application/json"))

            def _answer(self, status: int, content: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_PUT = _forward

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        super().__init__(target=self.server.serve_forever, daemon=True)


def test_an_agent_stops_sending_progress_to_a_service_that_refuses_it(service: Service, tmp_path: Path) -> None:
    older = _OlderService(service.url)
    older.start()
    try:
        job_id = _queue(service)
        beats = threading.Event()

        def execute(work: Work, progress) -> ResultDocument:  # type: ignore[no-untyped-def]
            progress("timing: round 1/2 gemm", 1, 2)
            if older.beaten.wait(60):   # heartbeats: the first refused, three more without progress
                beats.set()
            return _document(work)

        agent = _agent(Service(older.url, service.engine, service.settings, service.bundle), tmp_path,
                       lambda: [_device()], execute)
        assert agent.run(max_jobs=1) == 1
        agent.stop.set()
        assert beats.is_set() and _job(service, job_id)["status"] == "done"   # leases renewed all along
        assert older.refused == 1
        log = (tmp_path / "agent.log").read_text()
        assert '"progress_not_accepted"' in log and "body.progress: Extra inputs are not permitted" in log
    finally:
        older.server.shutdown()
