"""Hostile and malformed requests against the write endpoints, over real HTTP on both stores
(issue 18): each is refused with a 4xx JSON error naming the problem, and the store is exactly as
before (a full snapshot of every table). Every case's status is fixed below and asserted on SQLite
and on PostgreSQL alike, so both stores answer each input the same way.

One service per store serves every case (they change nothing, which each case checks): an
agent `agent-1` (token agent-token) holding running job A; `agent-2` (other-agent-token) holding
running job B and owning a GPU of class `gpu-h100`; job D done, with GEMM stored, and change point 1 on
its series; a password user `ada`, signed in to the web UI (the forms' cases, answered as pages).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import sqlalchemy as sa
from sqlalchemy import Engine

from pipeline.config import AnalysisSettings
from pipeline.config import GitHubSettings, Settings
from pipeline.contracts import DeviceClass, DeviceInfo
from pipeline.service import auth, users
from pipeline.service.app import create_app
from pipeline.results.store import ingest, queue
from pipeline.results.store.db import open_store, session_scope
from pipeline.results.store.models import ChangePoint, Commit, Job, Series
from tests.helpers.github_webhooks import sign
from tests.helpers.live_server import live_server

from tests.helpers import factories as f
from tests.helpers.stores import fresh_database, seed
from tests.helpers.http_client import post, snapshot

SECRET = "hostile-webhook-secret"
DATA = Path(__file__).parents[1] / "data"
MB = "x" * 1_000_000
PASSWORD = "correct horse battery"
GPU_CLASS = DeviceClass(name="gpu-h100", kind="gpu", targets=["cuda:sm_90"], runtime="cuda")


@dataclass
class Farm:
    url: str
    engine: Engine
    tokens: dict[str, str]
    """agent (agent-1's), other-agent (agent-2's), user, admin"""
    jobs: dict[str, tuple[str, int]]
    """A (agent-1, running, c1), B (agent-2, running, c2), D (agent-1, done, c3): (job id, commit label)"""
    browser: requests.Session
    """signed in to the web UI as `ada`"""
    csrf: str


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field in the page"
    return found.group(1)


def _job(s: Any, label: int, agent: str, status: str) -> str:
    run = ingest.create_run(s, repository=f.REPO, commit_sha=f.sha(label), kind="push", device_classes=[f.DEVICE_CLASS])
    job = s.get(Job, run.jobs[0].id)
    job.status, job.agent, job.lease_owner = status, agent, agent if status == "running" else None
    return str(job.id)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def farm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Farm]:
    home = tmp_path_factory.mktemp("hostile")
    with fresh_database(request.param, home) as url:
        engine = seed(open_store(url))
        try:
            with session_scope(engine) as s:
                tokens = {"agent": auth.create_token(s, name="agent-token", scopes=["agent"]),
                          "other-agent": auth.create_token(s, name="other-agent-token", scopes=["agent"]),
                          "user": auth.create_token(s, name="user-token", scopes=["user"]),
                          "admin": auth.create_token(s, name="admin-token", scopes=["admin"])}
                queue.register_agent(s, name="agent-1", token_name="agent-token", host="h1", version="1", devices=[])
                queue.register_agent(s, name="agent-2", token_name="other-agent-token", host="h2", version="1",
                                     devices=[(GPU_CLASS, DeviceInfo(device_class=GPU_CLASS.name, uid="GPU-agent-2",
                                                                        name="NVIDIA H100", host="h2"))])
                jobs = {"A": (_job(s, 1, "agent-1", "running"), 1), "B": (_job(s, 2, "agent-2", "running"), 2),
                        "D": (_job(s, 3, "agent-1", "running"), 3)}
            with session_scope(engine) as s:
                done = f.result_document(run_id=s.get(Job, jobs["D"][0]).run_id, job_id=jobs["D"][0],
                                         commit_sha=f.sha(3), results=[f.ok(f.GEMM, f.series_samples(1e-3))])
                ingest.ingest_result(s, document=done, analysis=AnalysisSettings())
                queue.complete_job(s, job_id=jobs["D"][0], agent_name="agent-1")
                commits = {c.sha: c for c in s.scalars(sa.select(Commit))}
                s.add(ChangePoint(series_id=s.scalar(sa.select(Series.id)), before_commit_id=commits[f.sha(2)].id,
                                  after_commit_id=commits[f.sha(3)].id, committed_at=commits[f.sha(3)].committed_at,
                                  history_index=1, before_level=1e-3, after_level=2e-3, magnitude=1.0, pvalue=1e-6,
                                  direction="regression", lifecycle="confirmed"))
                users.create_user(s, name="ada", password=PASSWORD)
            settings = Settings(home=home, github=GitHubSettings(webhook_secret=SECRET))
            with live_server(create_app(settings, engine)) as service:
                browser = requests.Session()
                signed = browser.post(f"{service}/login", data={"csrf": _csrf(browser.get(f"{service}/login").text),
                                                                "name": "ada", "password": PASSWORD}, timeout=30)
                assert signed.ok, signed.text[:500]
                yield Farm(service, engine, tokens, jobs, browser, _csrf(signed.text))
        finally:
            engine.dispose()


# --- request builders ----------------------------------------------------------------------------

Send = Callable[[Farm], requests.Response]


def _document(farm: Farm, job: str = "A", **case: Any) -> dict[str, Any]:
    job_id, label = farm.jobs[job]
    with session_scope(farm.engine) as s:
        run_id = s.get(Job, job_id).run_id
    doc = f.result_document(run_id=run_id, job_id=job_id, commit_sha=f.sha(label),
                            results=[f.ok(f.GEMM, f.series_samples(1e-3))])
    data: dict[str, Any] = json.loads(doc.model_dump_json())
    data["results"][0].update(case)
    return data


def _set(data: Any, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        data = data[int(part)] if isinstance(data, list) else data[part]
    if isinstance(data, list):
        data[int(last)] = value
    else:
        data[last] = value


def _raw(path: str, body: bytes, token: str = "agent") -> Send:
    return lambda farm: post(farm.url, path, body, farm.tokens[token])


def _result(changes: dict[str, Any] | None = None, raw: Callable[[str], str] = lambda t: t, *, job: str = "A",
            token: str = "agent", batch: bool = False, build: Callable[[dict[str, Any]], None] | None = None) -> Send:
    """A result document of `job` with `changes` (dotted path -> value) and `raw` applied to its text."""
    def send(farm: Farm) -> requests.Response:
        data = _document(farm, job)
        for path, value in (changes or {}).items():
            _set(data, path, value)
        if build is not None:
            build(data)
        text = raw(json.dumps(data))
        return post(farm.url, "/api/v1/results/batch" if batch else "/api/v1/results", f"[{text}]" if batch else text,
                    farm.tokens[token])
    return send


def _bogus_targets(status: str) -> Callable[[dict[str, Any]], None]:
    def build(data: dict[str, Any]) -> None:
        row = data["results"][0] if status == "ok" else {"case": f.GEMM, "status": "skipped", "reason": "other target"}
        data["results"] = [{**row, "target": f"llvm-cpu:bogus{i}"} for i in range(5000)]
    return build


def _webhook(body: bytes, event: str = "push") -> Send:
    def send(farm: Farm) -> requests.Response:
        return requests.post(f"{farm.url}/api/v1/webhooks/github", data=body, timeout=30, headers={
            "Content-Type": "application/json", "X-GitHub-Event": event, "X-GitHub-Delivery": "d-1",
            "X-Hub-Signature-256": sign(SECRET, body)})
    return send


def _request(method: str, path: str, body: Any = None, token: str | None = None) -> Send:
    """A JSON body (`str`: sent as it is; anything else: as JSON) with the token of that scope."""
    def send(farm: Farm) -> requests.Response:
        headers = {"content-type": "application/json"}
        if token is not None:
            headers["authorization"] = f"Bearer {farm.tokens[token]}"
        data = None if body is None else body if isinstance(body, (str, bytes)) else json.dumps(body)
        with session_scope(farm.engine) as s:   # {A}: job A's id, {A_run}: its run's
            names = {k: v[0] for k, v in farm.jobs.items()} | {f"{k}_run": s.get(Job, v[0]).run_id
                                                                for k, v in farm.jobs.items()}
        return requests.request(method, f"{farm.url}{path.format(**names)}", data=data, headers=headers, timeout=60)
    return send


def _run_job(changes: dict[str, Any] | None = None, raw: Callable[[str], str] = lambda t: t, *,
             path: str = "/api/v1/runs/bk-run/jobs/bk-job", agent: str = "agent-1") -> Send:
    """`benchfarm run-job`'s PUT (a new job of commit 7 on cpu-x86-64) with `changes` applied."""
    body = {"agent": agent, "repository": f.REPO, "commit": json.loads(f.commit(7).model_dump_json()), "kind": "push",
            "device_class": json.loads(f.device_class().model_dump_json()),
            "manifest": json.loads(f.manifest(f.sha(7), [f.built_entry(f.GEMM)]).model_dump_json())}
    for key, value in (changes or {}).items():
        _set(body, key, value)
    return _request("PUT", path, raw(json.dumps(body)), "agent")


def _registration(changes: dict[str, Any]) -> Send:
    body = {"name": "agent-1", "host": "h1", "version": "1", "devices": [{
        "device_class": json.loads(f.device_class().model_dump_json()),
        "info": {"device_class": f.DEVICE_CLASS, "uid": "host-1", "name": "CPU", "host": "h1"}}]}
    for key, value in changes.items():
        _set(body, key, value)
    return _request("POST", "/api/v1/agents", body, "agent")


def _gb(**entry: Any) -> dict[str, Any]:
    row = {"name": "BM_matmul", "run_name": "BM_matmul", "run_type": "iteration", "iterations": 10,
           "time_unit": "ms", "real_time": 0.5, **entry}
    return {"context": {"json_schema_version": 1}, "benchmarks": [row, {**row, "real_time": 0.6}]}


def _nvbench(change: str, value: Any) -> dict[str, Any]:
    data: dict[str, Any] = copy.deepcopy(json.loads((DATA / "nvbench.json").read_text()))
    _set(data, change, value)
    return data


RULES = {"gemm": [{"pattern": "BM_matmul*", "case": f.GEMM, "target": f.TARGET}],
         "conv": [{"pattern": "BM_matmul*", "case": f.CONV, "target": f.TARGET}],
         "nv": [{"pattern": "gemm_f32?Device=0 M=256?", "case": f.GEMM, "target": f.TARGET}]}


def _import(format: str, data: Any, rules: str = "gemm", job: str | None = None, files: dict[str, str] | None = None,
            **mapping: Any) -> Send:
    def send(farm: Farm) -> requests.Response:
        fields = {"repository": f.REPO, "commit": f.sha(1), "device_class": f.DEVICE_CLASS, "rules": RULES[rules],
                  "unmapped": "ignore", **mapping}
        if job is not None:
            fields |= {"job_id": farm.jobs[job][0], "commit": f.sha(farm.jobs[job][1])}
        body = {"mapping": fields, "data": data, **({"files": files} if files else {})}
        return post(farm.url, f"/api/v1/import/{format}", json.dumps(body), farm.tokens["agent"])
    return send


def _nul(text: str) -> Callable[[str], str]:
    """Puts a NUL escape (\\u0000) into the first occurrence of `text` in the JSON text."""
    return lambda body: body.replace(text, text[:-1] + "\\u0000" + text[-1], 1)


DEEP = b"[" * 100_000 + b"]" * 100_000
TRIAGE = "/api/v1/change-points/1/triage"
# name: (request, status, texts the answer names)
CASES: dict[str, tuple[Send, int, tuple[str, ...]]] = {
    # --- encoding and structure, before any parsing
    "invalid UTF-8 in a result": (_raw("/api/v1/results", b'{"schema_version": 1, "run_id": "\xff\xfe"}'), 422,
                                  ("not UTF-8",)),
    "invalid UTF-8 in a batch": (_raw("/api/v1/results/batch", b"[\xff]"), 422, ("not UTF-8",)),
    "invalid UTF-8 in an import": (_raw("/api/v1/import/nvbench", b'{"data": "\xc3\x28"}'), 422, ("not UTF-8",)),
    "invalid UTF-8 in an agent registration": (_raw("/api/v1/agents", b'{"name": "\xe2\x82"}'), 422,
                                               ("body", "not UTF-8")),
    "nested 100,000 deep (result)": (_raw("/api/v1/results", DEEP), 422, ("nested more than",)),
    "nested 100,000 deep (batch)": (_raw("/api/v1/results/batch", DEEP), 422, ("nested more than",)),
    "nested 100,000 deep (import)": (_raw("/api/v1/import/nvbench", DEEP), 422, ("nested more than",)),
    "nested 100,000 deep (signed webhook)": (_webhook(DEEP), 400, ("nested more than",)),
    "nested 100,000 deep (triage)": (_request("POST", TRIAGE, DEEP, "user"), 422, ("nested more than",)),
    "nested 100,000 deep (run-job)": (_request("PUT", "/api/v1/runs/r/jobs/j", DEEP, "agent"), 422,
                                      ("nested more than",)),
    "not JSON (agent registration)": (_request("POST", "/api/v1/agents", "{name: 1}", "agent"), 422, ("not JSON",)),
    # --- numbers: finite everywhere
    "NaN in a signed webhook": (_webhook(b'{"ref": "refs/heads/main", "after": NaN}'), 400, ("after", "NaN")),
    "Infinity in a signed webhook": (_webhook(b'{"ref": "refs/heads/main", "x": Infinity}'), 400, ("x", "Infinity")),
    "1e999 in a signed webhook": (_webhook(b'{"ref": "refs/heads/main", "x": 1e999}'), 400, ("1e999",)),
    "Infinity as max_abs_error with status ok": (
        _result(raw=lambda t: t.replace('"max_abs_error": 1e-06', '"max_abs_error": Infinity')), 422,
        ("results.0.correctness.max_abs_error", "Infinity")),
    "1e999 as max_rel_error with status ok": (
        _result(raw=lambda t: t.replace('"max_rel_error": 1e-05', '"max_rel_error": 1e999')), 422,
        ("results.0.correctness.max_rel_error", "out of a double's range")),
    "NaN as a sample": (_result({"results.0.samples.9": "NAN"}, lambda t: t.replace('"NAN"', "NaN")), 422,
                        ("results.0.samples.9", "NaN")),
    "-Infinity as a clock reading": (_result({"device.clocks_mhz": {"sm": "NINF"}}, lambda t: t.replace('"NINF"', "-Infinity")),
                                     422, ("device.clocks_mhz.sm", "-Infinity")),
    "NaN as a series' minimum magnitude": (_request("PUT", "/api/v1/series/1/settings", '{"min_magnitude": NaN}', "user"),
                                           422, ("body.min_magnitude", "NaN")),
    "Infinity as a claim's wait": (_request("POST", "/api/v1/jobs/claim",
                                            '{"agent": "agent-1", "devices": [], "wait_s": Infinity}', "agent"), 422,
                                   ("body.wait_s", "Infinity")),
    "schema_version true": (_result({"schema_version": True}), 422, ("schema_version",)),
    "schema_version true in a batch": (_result({"schema_version": True}, batch=True), 422, ("0.schema_version",)),
    # --- ids past what the store's integer columns hold
    "a series id of 2^63 (settings)": (_request("PUT", f"/api/v1/series/{2**63}/settings", {"min_magnitude": 0.1},
                                                "user"), 422, ("series_id",)),
    "a change point id of 2^63 (triage)": (_request("POST", f"/api/v1/change-points/{2**63}/triage",
                                                    {"state": "noisy"}, "user"), 422, ("change_point_id",)),
    "a series id of 2^64 (read)": (_request("GET", f"/api/v1/series/{2**64}"), 422, ("series_id",)),
    "a series id of 2^31 (read)": (_request("GET", f"/api/v1/series/{2**31}"), 422, ("series_id",)),
    "a bisection id of 2^63 - 2 (read)": (_request("GET", f"/api/v1/bisections/{2**63 - 2}"), 422, ("bisection_id",)),
    "a change point id of 2^31 (bisect)": (_request("POST", "/api/v1/bisections", {"change_point_id": 2**31}, "user"),
                                           422, ("change_point_id",)),
    "a pull request number of 2^31 (run-job)": (_run_job({"commit.pull_request": 2**31}), 422,
                                                ("commit.pull_request",)),
    "a binary size of 2^63 (run-job manifest)": (_run_job({"manifest.entries.0.compile.binary_bytes": 2**63}), 422,
                                                 ("binary_bytes",)),
    # --- foreign files with the wrong types inside
    "Google Benchmark time_unit []": (_import("google-benchmark", _gb(time_unit=[])), 422,
                                      ("data.benchmarks.0.time_unit", "unknown time unit")),
    "Google Benchmark real_time a list": (_import("google-benchmark", _gb(real_time=[1])), 422,
                                          ("data.benchmarks.0.real_time", "must be a number")),
    "NVBench meta a list": (_import("nvbench", _nvbench("meta", [1]), "nv"), 422, ("data.meta", "JSON object")),
    "NVBench meta.version a string": (_import("nvbench", _nvbench("meta.version", "1.0"), "nv"), 422,
                                      ("data.meta.version", "JSON object")),
    "NVBench devices a number": (_import("nvbench", _nvbench("devices", 3), "nv"), 422, ("data.devices", "JSON array")),
    "NVBench device id a list": (_import("nvbench", _nvbench("devices.0.id", [0]), "nv"), 422,
                                 ("data.devices.0.id", "integer")),
    "NVBench state.device a list": (_import("nvbench", _nvbench("benchmarks.0.states.0.device", [0]), "nv"), 422,
                                    ("data.benchmarks.0.states.0.device", "integer")),
    "NVBench summary data a number": (_import("nvbench", _nvbench("benchmarks.0.states.0.summaries.0.data", 5), "nv"),
                                      422, ("data.benchmarks.0.states.0.summaries.0.data", "JSON array")),
    "NVBench side file not base64": (_import("nvbench", _nvbench("meta.argv", []), "nv", files={"x.bin": "%%%"}), 422,
                                     ("files.x.bin", "base64")),
    # --- NUL characters in text (PostgreSQL cannot store them; refused alike on both stores)
    "NUL in a failure reason": (_result({"results.0": {"case": f.GEMM, "target": f.TARGET, "status": "error",
                                                       "reason": "boom!"}}, _nul("boom!")), 422, ("NUL",)),
    "NUL in a device name": (_result({"device.name": "gpu!"}, _nul("gpu!")), 422, ("NUL",)),
    "NUL in a device uid": (_result({"device.uid": "uid!"}, _nul("uid!")), 422, ("NUL",)),
    "NUL in the repository": (_result(raw=_nul(f.REPO)), 422, ("NUL",)),
    "NUL in an environment key": (_result({"environment": {"key!": "v"}}, _nul("key!")), 422, ("NUL",)),
    "NUL in a batch's agent name": (_result({"agent.name": "agent!"}, _nul("agent!"), batch=True), 422, ("NUL",)),
    "NUL in a triage note": (_request("POST", TRIAGE, '{"state": "noisy", "note": "a\\u0000b"}', "user"), 422,
                             ("body.note", "NUL")),
    "NUL in a commit message (run-job)": (_run_job({"commit.message": "msg!"}, _nul("msg!")), 422,
                                          ("body.commit.message", "NUL")),
    "NUL in a commit author (run-job)": (_run_job({"commit.author": "ada!"}, _nul("ada!")), 422,
                                         ("body.commit.author", "NUL")),
    "NUL in a branch (run-job)": (_run_job({"commit.branch": "main!"}, _nul("main!")), 422,
                                  ("body.commit.branch", "NUL")),
    "NUL in a mapping's device uid (import)": (_import("google-benchmark", _gb(), device_uid="dev\x00ice"), 422,
                                               ("NUL",)),
    "NUL in a failed job's error message": (_request("POST", "/api/v1/jobs/{A}/fail",
                                                     '{"agent": "agent-1", "reason": "lost\\u0000"}', "agent"), 422,
                                            ("body.reason", "NUL")),
    "NUL in an agent's host (registration)": (_registration({"host": "h\x00"}), 422, ("body.host", "NUL")),
    "NUL in a token name": (_request("POST", "/api/v1/tokens", {"name": "t\x00", "scopes": ["agent"]}, "admin"), 422,
                            ("body.name", "NUL")),
    "NUL in a signed webhook": (_webhook(b'{"ref": "refs/heads/ma\\u0000in"}'), 400, ("NUL",)),
    "NUL in a query parameter": (_request("GET", "/api/v1/commits?repository=bench%00kernels"), 422, ("NUL",)),
    "NUL in a path": (_request("GET", "/api/v1/jobs/job%00id"), 422, ("NUL",)),
    # --- 1 MB strings where the store keeps a bounded column
    "1 MB device uid": (_result({"device.uid": MB}), 422, ("device.uid", "at most 200")),
    "1 MB device name": (_result({"device.name": MB}), 422, ("device.name", "at most 200")),
    "1 MB device host": (_result({"device.host": MB}), 422, ("device.host", "at most 200")),
    "1 MB device driver": (_result({"device.driver": MB}), 422, ("device.driver", "at most 200")),
    "1 MB repository (result)": (_result({"repository": MB}), 422, ("repository", "at most 200")),
    "1 MB agent name (result)": (_result({"agent.name": MB}), 422, ("agent.name", "at most 200")),
    "1 MB agent version (result)": (_result({"agent.version": MB}), 422, ("agent.version", "at most 100")),
    "1 MB agent name (registration)": (_registration({"name": "a" * 1_000_000}), 422, ("body.name", "at most 200")),
    "1 MB host (registration)": (_registration({"host": MB}), 422, ("body.host", "at most 200")),
    "1 MB version (registration)": (_registration({"version": MB}), 422, ("body.version", "at most 100")),
    "1 MB hal_driver (registration)": (_registration({"devices.0.device_class.hal_driver": MB}), 422,
                                       ("hal_driver", "at most 64")),
    "1 MB commit author (run-job)": (_run_job({"commit.author": MB}), 422, ("body.commit.author", "at most 300")),
    "1 MB branch (run-job)": (_run_job({"commit.branch": MB}), 422, ("body.commit.branch", "at most 300")),
    "1 MB repository (run-job)": (_run_job({"repository": MB}), 422, ("body.repository", "at most 200")),
    "1 MB hal_driver (run-job)": (_run_job({"device_class.hal_driver": MB}), 422, ("hal_driver", "at most 64")),
    "1 MB compiler name (run-job manifest)": (_run_job({"manifest.entries.0.compile.compiler": MB}), 422,
                                              ("compiler", "at most 100")),
    "a case family of 101 characters (run-job manifest)": (
        _run_job({"manifest.entries.0.case": "g" * 101 + "/a/1x1/f32/iree"}), 422, ("manifest.entries.0.case",)),
    "a run id of 65 characters (run-job)": (_run_job(path=f"/api/v1/runs/{'r' * 65}/jobs/j"), 422, ("run_id",)),
    "1 MB agent name (run-job)": (_run_job(agent=MB), 422, ("body.agent", "at most 200")),
    "1 MB repository (import mapping)": (_import("google-benchmark", _gb(), repository=MB), 422,
                                         ("mapping.repository", "at most 200")),
    "1 MB triage note": (_request("POST", TRIAGE, {"state": "noisy", "note": MB}, "user"), 422, ("body.note",)),
    # --- what the last pass left (issue 33): wrong types where a file or payload has objects, versions
    # and ids; one rule for text anywhere in a document (no NUL, no lone surrogate, bounded)
    "a pull_request that is a list (signed webhook)": (
        _webhook(b'{"action": "opened", "pull_request": [1], "repository": {"full_name": "o/r"}}', "pull_request"),
        422, ("pull_request", "valid dictionary")),
    "a repository that is a list (signed push webhook)": (
        _webhook(b'{"ref": "refs/heads/main", "after": "' + b"a" * 40 + b'", "repository": [1]}'), 422,
        ("repository",)),
    "1 MB host name (Google Benchmark import)": (_import("google-benchmark", {**_gb(), "context": {
        "json_schema_version": 1, "host_name": MB}}), 422, ("data.context.host_name", "at most 64")),
    "1 MB device name (NVBench import)": (_import("nvbench", _nvbench("devices.0.name", MB), "nv"), 422,
                                          ("data.devices.0.name", "at most 200")),
    "json_schema_version true (Google Benchmark import)": (
        _import("google-benchmark", {**_gb(), "context": {"json_schema_version": True}}), 422,
        ("data.context.json_schema_version", "True")),
    "meta.version.json.major true (NVBench import)": (_import("nvbench", _nvbench("meta.version.json.major", True),
                                                              "nv"), 422, ("data.meta.version.json.major", "True")),
    "a lone surrogate in an environment value": (
        _result({"results.0.environment": {"k": "SURROGATE"}}, lambda t: t.replace("SURROGATE", "\\ud800")), 422,
        ("results.0.environment.k", "surrogate")),
    "a lone surrogate in an environment key": (
        _result({"environment": {"SURROGATE": "v"}}, lambda t: t.replace("SURROGATE", "\\udfff")), 422,
        ("environment", "surrogate")),
    "a lone surrogate in a device name": (_result({"device.name": "SURROGATE"},
                                                  lambda t: t.replace("SURROGATE", "\\ud800")), 422,
                                          ("device.name", "surrogate")),
    "an environment value of 1 MB": (_result({"results.0.environment": {"k": MB}}), 422,
                                     ("results.0.environment.k", "at most 10000")),
    "NUL in a heartbeat's list of devices": (_request("POST", "/api/v1/agents/agent-1/heartbeat",
                                                      '{"devices": ["host-1", "a\\u0000b"]}', "agent"), 422,
                                             ("body.devices.1", "NUL")),
    "change_point_id true (bisection)": (_request("POST", "/api/v1/bisections", {"change_point_id": True}, "user"), 422,
                                         ("body.change_point_id", "integer")),
    "series_id false (bisection)": (_request("POST", "/api/v1/bisections", {"series_id": False}, "user"), 422,
                                    ("body.series_id", "not a boolean")),
    "a pull request number true (run-job)": (_run_job({"commit.pull_request": True}), 422,
                                             ("commit.pull_request", "not a boolean")),
    "a binary size true (run-job manifest)": (_run_job({"manifest.entries.0.compile.binary_bytes": True}), 422,
                                              ("binary_bytes", "not a boolean")),
    # --- results the store must not take
    "5,000 ok results on targets never built": (_result(build=_bogus_targets("ok")), 422,
                                                ("results.0.target", "llvm-cpu:bogus0 is not a target of device class")),
    "5,000 skipped results on targets never built": (_result(build=_bogus_targets("skipped")), 422,
                                                     ("results.0.target", "no bundle of the job built it")),
    "a result on a target not in the device class": (_result({"results.0.target": "cuda:sm_90"}), 422,
                                                     ("results.0.target", "cuda:sm_90 is not a target")),
    "a result naming another class's device (another agent's GPU)": (
        _result({"device.uid": "GPU-agent-2"}), 422, ("device.uid", "agent agent-2's, of device class gpu-h100")),
    "a result naming an unknown case": (_result({"results.0.case": "gemm/nope/1x1x1/f32/iree"}), 422,
                                        ("results.0.case", "unknown case")),
    # --- object level: whose job, in which state; device classes change only by an admin
    "an upload into another agent's job": (_result(job="B"), 403, ("leased to agent 'agent-2'",)),
    "a batch upload into another agent's job": (_result(job="B", batch=True), 403, ("0: job", "agent-2")),
    "new results into a done job": (_result({"results.0.case": f.CONV}, job="D"), 409, ("is done",)),
    "an import naming another agent's job": (_import("google-benchmark", _gb(), job="B"), 403,
                                             ("leased to agent 'agent-2'",)),
    "an import of new results into a done job": (
        _import("google-benchmark", _gb(), job="D", rules="conv"), 409, ("is done",)),
    "run-job taking over another agent's job": (_run_job(path="/api/v1/runs/x/jobs/{B}"), 403,
                                                ("leased to agent 'agent-2'",)),
    "run-job adding a second job on one device class to a run": (_run_job({
        "commit": json.loads(f.commit(1, 0, minutes=1).model_dump_json()), "manifest.commit": f.sha(1)},
        path="/api/v1/runs/{A_run}/jobs/second"), 422, ("on cpu-x86-64 already",)),
    "run-job adding a job of another commit to a run": (_run_job(path="/api/v1/runs/{A_run}/jobs/second"), 422,
                                                        ("run_id", "not bench/kernels at")),
    "run-job naming another token's agent": (_run_job(agent="agent-2"), 403, ("registered with token",)),
    "run-job redefining a device class": (_run_job({"device_class": {
        "name": f.DEVICE_CLASS, "kind": "gpu", "targets": ["cuda:sm_90"], "runtime": "cuda"}}), 409,
        ("only an admin token may redefine it",)),
    "an agent registration redefining a device class": (_registration({"devices.0.device_class.kind": "gpu"}), 409,
                                                        ("only an admin token may redefine it",)),
    "an agent registering under another token's agent": (_registration({"name": "agent-2"}), 403,
                                                         ("registered with token",)),
    "completing another agent's job": (_request("POST", "/api/v1/jobs/{B}/complete", {"agent": "agent-2"}, "agent"),
                                       403, ("registered with token",)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_input_is_refused_and_changes_nothing(farm: Farm, name: str) -> None:
    send, status, named = CASES[name]
    before = snapshot(farm.engine)
    response = send(farm)
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"].startswith("application/json"), response.text[:200]
    for text in named:
        assert text in response.text, response.text[:500]
    assert snapshot(farm.engine) == before


# --- the web UI's forms: the same models and limits as the API's. A browser (text/html in its Accept)
# gets a 422 page naming the field; a client asking for JSON alone gets the API's 422 JSON body naming
# it as `form.<field>` (render.wants_html).

Form = Callable[[Farm, dict[str, str]], requests.Response]
"""(farm, extra headers) -> the form's answer"""
BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}   # Chromium's
JSON_CLIENT = {"Accept": "application/json"}


def _form(path: str, **fields: str) -> Form:
    def send(farm: Farm, headers: dict[str, str]) -> requests.Response:
        return farm.browser.post(f"{farm.url}{path}", data={"csrf": farm.csrf, **fields}, timeout=60,
                                 allow_redirects=False, headers=headers)
    return send


def _sign_in(name: str) -> Form:
    def send(farm: Farm, headers: dict[str, str]) -> requests.Response:
        browser = requests.Session()
        csrf = _csrf(browser.get(f"{farm.url}/login", timeout=30).text)
        return browser.post(f"{farm.url}/login", data={"csrf": csrf, "name": name, "password": PASSWORD},
                            timeout=60, allow_redirects=False, headers=headers)
    return send


TRIAGE_FORM = "/change-points/1/triage"
# name: (request, the field at fault, what the answer says of it)
FORM_CASES: dict[str, tuple[Form, str, str]] = {
    "NUL in a triage note (form)": (_form(TRIAGE_FORM, state="noisy", note="a\x00b"), "note", "NUL"),
    "NUL in an assignee (form)": (_form(TRIAGE_FORM, state="assigned", assignee="ada\x00"), "assignee", "NUL"),
    "NUL in a bug link (form)": (_form(TRIAGE_FORM, state="confirmed", bug_link="https://bugs/1\x00"), "bug_link",
                                 "NUL"),
    "1 MB assignee (form)": (_form(TRIAGE_FORM, state="assigned", assignee=MB), "assignee", "at most 200"),
    "1 MB bug link (form)": (_form(TRIAGE_FORM, state="confirmed", bug_link=MB), "bug_link", "at most 1000"),
    "1 MB triage note (form)": (_form(TRIAGE_FORM, state="noisy", note=MB), "note", "at most 10000"),
    "an unknown triage state (form)": (_form(TRIAGE_FORM, state="bogus"), "state", "Input should be"),
    "NUL in the name (sign-in form)": (_sign_in("ad\x00a"), "name", "NUL"),
}


@pytest.mark.parametrize("name", list(FORM_CASES))
def test_hostile_form_input_is_refused_and_changes_nothing(farm: Farm, name: str) -> None:
    send, field, reason = FORM_CASES[name]
    before = snapshot(farm.engine)
    response = send(farm, BROWSER)
    assert response.status_code == 422, response.text[-2000:]
    assert response.headers["content-type"].startswith("text/html"), response.headers
    assert field in response.text and reason in response.text, response.text[-2000:]
    assert snapshot(farm.engine) == before


@pytest.mark.parametrize("name", list(FORM_CASES))
def test_hostile_form_input_asked_as_json_is_a_json_error_naming_the_field(farm: Farm, name: str) -> None:
    send, field, reason = FORM_CASES[name]
    before = snapshot(farm.engine)
    response = send(farm, JSON_CLIENT)
    assert response.status_code == 422, response.text[-2000:]
    assert response.headers["content-type"].startswith("application/json"), response.text[:500]
    errors = response.json()["errors"]
    assert any(e["field"] == f"form.{field}" and reason in e["reason"] for e in errors), errors
    assert snapshot(farm.engine) == before
