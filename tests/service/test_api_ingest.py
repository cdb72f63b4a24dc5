"""Uploads over real HTTP on both stores: scopes, batches, and every refusal leaving the store as it was."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests
import sqlalchemy as sa
from sqlalchemy import Engine

from pipeline.config import Settings
from pipeline.service import auth
from pipeline.results.store import ingest, queue
from pipeline.results.store.models import Agent, Job
from pipeline.service.app import create_app
from pipeline.results.store.db import session_scope
from tests.helpers.live_server import live_server

from tests.helpers import factories as f
from tests.helpers.http_client import post, snapshot

BOOTSTRAP = "bootstrap-admin-token"


@dataclass
class Service:
    url: str
    engine: Engine
    tokens: dict[str, str]
    """scope -> a stored token holding only that scope"""


def _service(seeded: Engine, tmp_path: Any, **settings: Any) -> Iterator[Service]:
    with session_scope(seeded) as s:
        tokens = {scope: auth.create_token(s, name=f"{scope}-token", scopes=[scope]) for scope in auth.SCOPES}
    with live_server(create_app(Settings(home=tmp_path, api_token=BOOTSTRAP, **settings), seeded)) as url:
        yield Service(url, seeded, tokens)


@pytest.fixture
def service(seeded: Engine, tmp_path: Any) -> Iterator[Service]:
    yield from _service(seeded, tmp_path, max_upload_bytes=256 * 1024)


AGENT = "agent-1"
"""The agent the tests' jobs are leased to, registered with the stored agent-scope token."""


def new_job(engine: Engine, label: int = 1, *, agent: str = AGENT, token_name: str = "agent-token") -> tuple[str, str]:
    """A job running under `agent`, which registered with the token named `token_name`."""
    with session_scope(engine) as s:
        run = ingest.create_run(s, repository=f.REPO, commit_sha=f.sha(label), kind="local",
                                device_classes=[f.DEVICE_CLASS])
        if s.scalar(sa.select(Agent.id).where(Agent.name == agent)) is None:
            queue.register_agent(s, name=agent, token_name=token_name, host="test", version="", devices=[])
        job = s.get(Job, run.jobs[0].id)
        job.status, job.agent, job.lease_owner = "running", agent, agent
        return run.id, job.id


def document(engine: Engine, label: int = 1, *, agent: str = AGENT, token_name: str = "agent-token",
             **case: Any) -> dict[str, Any]:
    run_id, job_id = new_job(engine, label, agent=agent, token_name=token_name)
    doc = f.result_document(run_id=run_id, job_id=job_id, commit_sha=f.sha(label),
                            results=[f.ok(f.GEMM, f.series_samples(1e-3))])
    data = json.loads(doc.model_dump_json())
    data["results"][0].update(case)
    return data


def assert_refused(response: requests.Response, status: int, named: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert named in response.text, response.text


# --- scopes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("scope", ["agent", "admin"])
def test_agent_and_admin_tokens_upload(service: Service, scope: str) -> None:
    response = post(service.url, "/api/v1/results", json.dumps(document(service.engine)), service.tokens[scope])
    assert response.status_code == 200, response.text
    assert response.json()["stored"] == 1
    assert response.json()["samples"] == 10


def test_the_bootstrap_token_uploads(service: Service) -> None:
    response = post(service.url, "/api/v1/results", json.dumps(document(service.engine)), BOOTSTRAP)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(("token", "status", "named"), [
    (None, 401, "bearer token"),
    ("bf_not-a-token", 401, "bearer token"),
    ("user", 403, "lacks the agent scope"),
    ("revoked", 401, "revoked"),
])
def test_uploads_without_the_agent_scope_are_refused(
    service: Service, token: str | None, status: int, named: str
) -> None:
    body = json.dumps(document(service.engine))
    if token == "revoked":
        with session_scope(service.engine) as s:
            auth.revoke_token(s, name="agent-token")
        token = service.tokens["agent"]
    elif token in service.tokens:
        token = service.tokens[token]
    before = snapshot(service.engine)
    for path in ("/api/v1/results", "/api/v1/results/batch", "/api/v1/import/nvbench"):
        assert_refused(post(service.url, path, body, token), status, named)
    assert snapshot(service.engine) == before


def test_writes_are_off_without_any_token(engine: Engine, tmp_path: Any) -> None:
    with live_server(create_app(Settings(home=tmp_path), engine)) as url:
        response = post(url, "/api/v1/results/batch", "[]", "anything")
    assert_refused(response, 403, "API writes are disabled")
    assert "benchfarm token create" in response.json()["error"]


def test_stored_tokens_work_without_a_bootstrap_token(seeded: Engine, tmp_path: Any) -> None:
    with session_scope(seeded) as s:
        token = auth.create_token(s, name="only", scopes=["agent"])
    with live_server(create_app(Settings(home=tmp_path), seeded)) as url:
        body = json.dumps(document(seeded, agent="only-agent", token_name="only"))
        assert post(url, "/api/v1/results", body, token).status_code == 200
        assert_refused(post(url, "/api/v1/results", "{}", "wrong"), 401, "bearer token")


def test_admins_manage_tokens_over_the_api(service: Service) -> None:
    created = post(service.url, "/api/v1/tokens", json.dumps({"name": "agent-2", "scopes": ["agent"]}),
                   service.tokens["admin"])
    assert created.status_code == 201, created.text
    token = created.json()["token"]
    assert token.startswith("bf_")
    body = json.dumps(document(service.engine, agent="agent-2", token_name="agent-2"))
    assert post(service.url, "/api/v1/results", body, token).status_code == 200
    listed = requests.get(f"{service.url}/api/v1/tokens", headers={"authorization": f"Bearer {BOOTSTRAP}"}, timeout=10)
    assert "agent-2" in [t["name"] for t in listed.json()] and token not in listed.text
    assert_refused(post(service.url, "/api/v1/tokens", json.dumps({"name": "x", "scopes": ["admin"]}),
                        service.tokens["agent"]), 403, "lacks the admin scope")
    assert_refused(post(service.url, "/api/v1/tokens", json.dumps({"name": "agent-2", "scopes": ["agent"]}),
                        BOOTSTRAP), 422, "exists")
    revoked = requests.delete(f"{service.url}/api/v1/tokens/agent-2", headers={"authorization": f"Bearer {BOOTSTRAP}"},
                              timeout=10)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    assert_refused(post(service.url, "/api/v1/results", json.dumps(document(service.engine)), token), 401, "revoked")


# --- one document: malformed input -------------------------------------------------------------

MALFORMED = [
    pytest.param({"samples": [1e-3] * 9 + ["slow"]}, "results.0.samples.9", id="wrong-type"),
    pytest.param({"samples": [1e-3] * 9 + [math.nan]}, "results.0.samples.9", id="nan"),
    pytest.param({"samples": [1e-3] * 9 + [math.inf]}, "results.0.samples.9", id="infinite"),
    pytest.param({"samples": [1e-3] * 9 + [-1e-3]}, "results.0.samples.9", id="negative"),
    pytest.param({"samples": [1e-3] * 9 + [0.0]}, "results.0.samples.9", id="zero"),
    pytest.param({"case": "gemm/unknown/1x1x1/f32/iree"}, "results.0.case: unknown case gemm/unknown/1x1x1/f32/iree",
                 id="unknown-case"),
    pytest.param({"status": 3}, "results.0.status", id="wrong-type-status"),
]


@pytest.mark.parametrize(("case_fields", "named"), MALFORMED)
def test_a_malformed_document_is_refused_and_changes_nothing(
    service: Service, case_fields: dict[str, Any], named: str
) -> None:
    body = json.dumps(document(service.engine, **case_fields))  # NaN and Infinity as Python's json writes them
    before = snapshot(service.engine)
    assert_refused(post(service.url, "/api/v1/results", body, service.tokens["agent"]), 422, named)
    assert snapshot(service.engine) == before


def test_an_unknown_schema_version_is_refused(service: Service) -> None:
    doc = document(service.engine)
    doc["schema_version"] = 2
    before = snapshot(service.engine)
    assert_refused(post(service.url, "/api/v1/results", json.dumps(doc), service.tokens["agent"]), 422,
                   "unknown schema version 2")
    assert snapshot(service.engine) == before


def test_a_duplicate_upload_succeeds_and_writes_nothing(service: Service) -> None:
    body = json.dumps(document(service.engine))
    assert post(service.url, "/api/v1/results", body, service.tokens["agent"]).json()["stored"] == 1
    before = snapshot(service.engine)
    again = post(service.url, "/api/v1/results", body, service.tokens["agent"])
    assert again.status_code == 200
    assert again.json() | {"job_id": None} == {"job_id": None, "stored": 0, "duplicates": 1, "samples": 0}
    assert snapshot(service.engine) == before


FIFTY_MB = 50 * 1024 * 1024


@pytest.fixture
def default_limit_service(seeded: Engine, tmp_path: Any) -> Iterator[Service]:
    """The service with the default body limit (16 MiB)."""
    yield from _service(seeded, tmp_path)


@pytest.mark.parametrize("path", ["/api/v1/results", "/api/v1/results/batch", "/api/v1/import/google-benchmark"])
def test_a_50_mb_body_is_refused_from_its_length_alone(default_limit_service: Service, path: str) -> None:
    service = default_limit_service
    before = snapshot(service.engine)
    response = post(service.url, path, b" " * FIFTY_MB, service.tokens["agent"])
    assert_refused(response, 413, "request body over 16777216 bytes")
    assert snapshot(service.engine) == before


class CountingApp:
    """ASGI wrapper counting the body bytes the application actually took in."""

    def __init__(self, app: Any):
        self.app = app
        self.received = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def counted() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                self.received += len(message.get("body", b""))
            return message

        await self.app(scope, counted, send)


def test_a_50_mb_chunked_body_is_refused_before_it_is_all_read(seeded: Engine, tmp_path: Any) -> None:
    """No Content-Length: the service stops reading once the limit is passed, long before 50 MB."""
    limit = 16 * 1024 * 1024
    with session_scope(seeded) as s:
        token = auth.create_token(s, name="agent", scopes=["agent"])
    app = CountingApp(create_app(Settings(home=tmp_path, max_upload_bytes=limit), seeded))

    def chunks() -> Iterator[bytes]:
        for _ in range(FIFTY_MB // (1024 * 1024)):
            yield b" " * (1024 * 1024)

    before = snapshot(seeded)
    with live_server(app) as url:  # type: ignore[arg-type]
        response = post(url, "/api/v1/results", chunks(), token)
    assert_refused(response, 413, f"request body over {limit} bytes")
    assert "content-length" not in response.request.headers
    assert limit < app.received < limit + 2 * 1024 * 1024
    assert snapshot(seeded) == before


# --- batches -------------------------------------------------------------------------------------


def test_a_batch_is_stored_and_sending_it_again_is_a_duplicate(service: Service) -> None:
    batch = [document(service.engine, 1), document(service.engine, 2)]
    first = post(service.url, "/api/v1/results/batch", json.dumps(batch), service.tokens["agent"])
    assert first.status_code == 200, first.text
    assert first.json()["stored"] == 2 and first.json()["samples"] == 20
    assert [d["job_id"] for d in first.json()["documents"]] == [d["job_id"] for d in batch]
    before = snapshot(service.engine)
    again = post(service.url, "/api/v1/results/batch", json.dumps(batch), service.tokens["agent"])
    assert again.status_code == 200
    assert (again.json()["stored"], again.json()["duplicates"]) == (0, 2)
    assert snapshot(service.engine) == before


@pytest.mark.parametrize(("case_fields", "named"), MALFORMED)
def test_one_bad_document_refuses_the_whole_batch(service: Service, case_fields: dict[str, Any], named: str) -> None:
    batch = [document(service.engine, 1), document(service.engine, 2, **case_fields)]
    before = snapshot(service.engine)
    response = post(service.url, "/api/v1/results/batch", json.dumps(batch), service.tokens["agent"])
    assert_refused(response, 422, f"1.{named}")
    assert snapshot(service.engine) == before


@pytest.mark.parametrize(("body", "named"), [
    ('{"not": "a list"}', "must be a JSON array"),
    ("[]", "empty batch"),
    ('["text"]', "must be a JSON object"),
    ("[{", "not JSON"),
])
def test_a_batch_that_is_no_list_of_documents_is_refused(service: Service, body: str, named: str) -> None:
    before = snapshot(service.engine)
    assert_refused(post(service.url, "/api/v1/results/batch", body, service.tokens["agent"]), 422, named)
    assert snapshot(service.engine) == before


def test_a_batch_with_an_unknown_schema_version_names_the_document(service: Service) -> None:
    batch = [document(service.engine, 1), document(service.engine, 2)]
    batch[1]["schema_version"] = 7
    before = snapshot(service.engine)
    response = post(service.url, "/api/v1/results/batch", json.dumps(batch), service.tokens["agent"])
    assert_refused(response, 422, "unknown schema version 7")
    assert response.json()["errors"][0]["field"] == "1.schema_version"
    assert snapshot(service.engine) == before


def test_openapi_documents_the_upload_endpoints(service: Service) -> None:
    spec = requests.get(f"{service.url}/openapi.json", timeout=10).json()
    for path in ("/api/v1/results", "/api/v1/results/batch", "/api/v1/import/{format}", "/api/v1/tokens"):
        operation = spec["paths"][path]["post"]
        assert operation["summary"]
        assert "200" in operation["responses"] or "201" in operation["responses"]
    batch = spec["paths"]["/api/v1/results/batch"]["post"]
    assert batch["requestBody"]["content"]["application/json"]["schema"]["items"]["$ref"].endswith("/ResultDocument")
    assert {"ResultDocument", "FormatMapping", "BatchSummary", "ImportSummary", "ErrorBody"} <= set(spec["components"]["schemas"])
    assert requests.get(f"{service.url}/docs", timeout=10).status_code == 200


# --- object level: whose job, in which state ---------------------------------------------------


def test_another_agents_token_cannot_upload_into_its_job(service: Service) -> None:
    with session_scope(service.engine) as s:
        other = auth.create_token(s, name="other-agent-token", scopes=["agent"])
    body = json.dumps(document(service.engine))   # job leased to agent-1 (agent-token)
    before = snapshot(service.engine)
    assert_refused(post(service.url, "/api/v1/results", body, other), 403, "leased to agent 'agent-1'")
    assert_refused(post(service.url, "/api/v1/results/batch", f"[{body}]", other), 403, "0: job")
    assert snapshot(service.engine) == before
    assert post(service.url, "/api/v1/results", body, service.tokens["admin"]).status_code == 200   # admin may


def test_a_done_job_takes_an_identical_resend_but_nothing_new(service: Service) -> None:
    first = document(service.engine)
    assert post(service.url, "/api/v1/results", json.dumps(first), service.tokens["agent"]).json()["stored"] == 1
    with session_scope(service.engine) as s:
        queue.complete_job(s, job_id=first["job_id"], agent_name=AGENT)
    before = snapshot(service.engine)
    again = post(service.url, "/api/v1/results", json.dumps(first), service.tokens["agent"])
    assert again.status_code == 200 and again.json()["duplicates"] == 1   # a spool re-sent after the job ended
    extra = json.loads(json.dumps(first))
    extra["results"][0]["case"] = f.CONV
    assert_refused(post(service.url, "/api/v1/results", json.dumps(extra), service.tokens["agent"]), 409,
                   "is done: it takes no new results")
    assert snapshot(service.engine) == before


def test_a_queued_job_takes_no_results(service: Service) -> None:
    run_id, job_id = new_job(service.engine, 2)
    with session_scope(service.engine) as s:
        job = s.get(Job, job_id)
        job.status, job.agent, job.lease_owner = "queued", None, None
    doc = f.result_document(run_id=run_id, job_id=job_id, commit_sha=f.sha(2),
                            results=[f.ok(f.GEMM, f.series_samples(1e-3))])
    before = snapshot(service.engine)
    assert_refused(post(service.url, "/api/v1/results", doc.model_dump_json(), service.tokens["agent"]), 409,
                   "is queued")
    assert snapshot(service.engine) == before


def _external_job_body(device_class: dict[str, Any]) -> str:
    return json.dumps({"agent": "bk-agent", "repository": f.REPO, "commit": json.loads(f.commit(7).model_dump_json()),
                       "kind": "push", "device_class": device_class,
                       "manifest": json.loads(f.manifest(f.sha(7), [f.built_entry(f.GEMM)]).model_dump_json())})


def _put(service: Service, path: str, body: str, token: str) -> requests.Response:
    return requests.put(f"{service.url}{path}", data=body, timeout=10, headers={
        "authorization": f"Bearer {token}", "content-type": "application/json"})


def test_an_agent_cannot_redefine_a_device_class_through_run_job(service: Service) -> None:
    """`PUT /runs/{run}/jobs/{job}` (benchfarm run-job) names its device class: a new one is created,
    an existing one turned into something else is refused unless the token is an admin's."""
    same = json.loads(f.device_class().model_dump_json())
    redefined = same | {"kind": "gpu", "targets": ["cuda:sm_90"], "runtime": "cuda", "hal_driver": None}
    before = snapshot(service.engine)
    refused = _put(service, "/api/v1/runs/bk-run/jobs/bk-job", _external_job_body(redefined), service.tokens["agent"])
    assert_refused(refused, 409, "only an admin token may redefine it")
    assert snapshot(service.engine) == before
    ok = _put(service, "/api/v1/runs/bk-run/jobs/bk-job", _external_job_body(same), service.tokens["agent"])
    assert ok.status_code == 200 and ok.json()["status"] == "running", ok.text
    # the job's writer is the token that started it: another agent token cannot upload into it
    with session_scope(service.engine) as s:
        other = auth.create_token(s, name="other-agent-token", scopes=["agent"])
    doc = f.result_document(run_id="bk-run", job_id="bk-job", commit_sha=f.sha(7),
                            results=[f.ok(f.GEMM, f.series_samples(1e-3))])
    assert_refused(post(service.url, "/api/v1/results", doc.model_dump_json(), other), 403, "bk-agent")
    assert post(service.url, "/api/v1/results", doc.model_dump_json(), service.tokens["agent"]).status_code == 200
    admin = _put(service, "/api/v1/runs/bk-run-2/jobs/bk-job-2", _external_job_body(redefined), service.tokens["admin"])
    assert admin.status_code == 200, admin.text


def test_an_agent_cannot_redefine_a_device_class_by_registering(service: Service) -> None:
    """POST /agents reports the agent's device classes: a new one is created, an existing one with
    another definition is refused (409, nothing written) unless the token is an admin's."""
    same = json.loads(f.device_class().model_dump_json())
    redefined = same | {"kind": "gpu", "targets": ["cuda:sm_90"], "runtime": "cuda", "hal_driver": None}

    def register(device_class: dict[str, Any], token: str) -> requests.Response:
        return requests.post(f"{service.url}/api/v1/agents", timeout=10, headers={"authorization": f"Bearer {token}"},
                             json={"name": "agent-9", "devices": [{"device_class": device_class, "info": {
                                 "device_class": device_class["name"], "uid": "cpu-9"}}]})

    before = snapshot(service.engine)
    assert_refused(register(redefined, service.tokens["agent"]), 409, "only an admin token may redefine it")
    assert snapshot(service.engine) == before
    assert register(same, service.tokens["agent"]).status_code == 200
    assert register(redefined, service.tokens["admin"]).status_code == 200


def test_a_jobs_results_come_back_with_the_environment_they_were_measured_in(service: Service) -> None:
    data = document(service.engine, environment={"input_seed": "7", "placements": "3", "timing_group": "2/3"})
    data["environment"] = {"torch": "2.11.0", "placement_budget_bytes": str(6 << 30), "timing_groups": "3"}
    assert post(service.url, "/api/v1/results", json.dumps(data), service.tokens["agent"]).status_code == 200
    response = requests.get(f"{service.url}/api/v1/jobs/{data['job_id']}/results", timeout=10)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["job_id"] == data["job_id"] and body["device_class"] == f.DEVICE_CLASS
    assert body["environment"] == data["environment"]
    (result,) = body["results"]
    assert result["case_id"] == f.GEMM and result["status"] == "ok" and result["n"] == 10
    assert result["median"] == pytest.approx(1e-3, rel=0.1) and result["paired_base_sha"] is None
    assert result["environment"] == {"input_seed": "7", "placements": "3", "timing_group": "2/3"}
    missing = requests.get(f"{service.url}/api/v1/jobs/no-such-job/results", timeout=10)
    assert_refused(missing, 404, "no job no-such-job")
