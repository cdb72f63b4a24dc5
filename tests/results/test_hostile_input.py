"""Hostile and malformed requests against the write endpoints, over real HTTP on both stores
(issue 18): each is refused with a 4xx JSON error naming the problem, the same status on SQLite
and PostgreSQL, and the store is exactly as before (a full snapshot of every table)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from sqlalchemy import Engine

from pipeline import dispatch
from pipeline.config import GitHubSettings, Settings
from pipeline.service import auth
from pipeline.service.app import create_app
from pipeline.store import ingest
from pipeline.store.db import session_scope
from pipeline.store.models import Job
from tests.helpers.github_webhooks import sign
from tests.helpers.live_server import live_server

from . import factories as f
from .http_client import post, snapshot

SECRET = "hostile-webhook-secret"


class Farm:
    def __init__(self, url: str, engine: Engine, token: str, admin: str, job: dict[str, Any]):
        self.url, self.engine, self.token, self.admin, self.job = url, engine, token, admin, job


@pytest.fixture
def farm(seeded: Engine, tmp_path: Any) -> Iterator[Farm]:
    with session_scope(seeded) as s:
        token = auth.create_token(s, name="agent-token", scopes=["agent"])
        admin = auth.create_token(s, name="admin-token", scopes=["admin"])
        run = ingest.create_run(s, repository=f.REPO, commit_sha=f.sha(1), kind="local", device_classes=[f.DEVICE_CLASS])
        dispatch.register_agent(s, name="agent-1", token_name="agent-token", host="h", version="", devices=[])
        job = s.get(Job, run.jobs[0].id)
        job.status, job.agent, job.lease_owner = "running", "agent-1", "agent-1"
        ids = {"run_id": run.id, "job_id": job.id}
    settings = Settings(home=tmp_path, github=GitHubSettings(webhook_secret=SECRET))
    with live_server(create_app(settings, seeded)) as url:
        yield Farm(url, seeded, token, admin, ids)


def _document(farm: Farm, **case: Any) -> dict[str, Any]:
    doc = f.result_document(run_id=farm.job["run_id"], job_id=farm.job["job_id"], commit_sha=f.sha(1),
                            results=[f.ok(f.GEMM, f.series_samples(1e-3))])
    data: dict[str, Any] = json.loads(doc.model_dump_json())
    data["results"][0].update(case)
    return data


def _results(body: bytes) -> Callable[[Farm], requests.Response]:
    return lambda farm: post(farm.url, "/api/v1/results", body, farm.token)


def _doc(mutate: Callable[[dict[str, Any]], None], raw: Callable[[str], str] = lambda t: t
         ) -> Callable[[Farm], requests.Response]:
    def send(farm: Farm) -> requests.Response:
        data = _document(farm)
        mutate(data)
        return post(farm.url, "/api/v1/results", raw(json.dumps(data)), farm.token)
    return send


def _webhook(body: bytes) -> Callable[[Farm], requests.Response]:
    def send(farm: Farm) -> requests.Response:
        return requests.post(f"{farm.url}/api/v1/webhooks/github", data=body, timeout=30, headers={
            "Content-Type": "application/json", "X-GitHub-Event": "push", "X-GitHub-Delivery": "d-1",
            "X-Hub-Signature-256": sign(SECRET, body)})
    return send


def _put(path: str, body: dict[str, Any]) -> Callable[[Farm], requests.Response]:
    return lambda farm: requests.put(f"{farm.url}{path}", json=body, timeout=10,
                                     headers={"authorization": f"Bearer {farm.admin}"})


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        target: Any = data
        *parents, last = path.split(".")
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[last] = value
    return mutate


DEEP = b"[" * 100_000 + b"]" * 100_000
CASES: dict[str, tuple[Callable[[Farm], requests.Response], int, str]] = {
    "invalid UTF-8 in a result": (_results(b'{"schema_version": 1, "run_id": "\xff\xfe"}'), 422, "not UTF-8"),
    "invalid UTF-8 in a batch": (lambda farm: post(farm.url, "/api/v1/results/batch", b"[\xff]", farm.token), 422,
                                 "not UTF-8"),
    "nested 100,000 deep (result)": (_results(DEEP), 422, "nested more than"),
    "nested 100,000 deep (batch)": (lambda farm: post(farm.url, "/api/v1/results/batch", DEEP, farm.token), 422,
                                    "nested more than"),
    "nested 100,000 deep (import)": (lambda farm: post(farm.url, "/api/v1/import/nvbench", DEEP, farm.token), 422,
                                     "nested more than"),
    "nested 100,000 deep (signed webhook)": (_webhook(DEEP), 400, "nested more than"),
    "NaN in a signed webhook": (_webhook(b'{"ref": "refs/heads/main", "after": NaN}'), 400, "NaN"),
    "Infinity in a signed webhook": (_webhook(b'{"ref": "refs/heads/main", "x": Infinity}'), 400, "Infinity"),
    "Infinity as max_abs_error with status ok": (
        _doc(lambda d: None, lambda t: t.replace('"max_abs_error": 1e-06', '"max_abs_error": Infinity')), 422,
        "Infinity"),
    "NaN as a sample": (_doc(lambda d: d["results"][0].update(samples=[1e-3] * 9 + ["NAN"]),
                             lambda t: t.replace('"NAN"', "NaN")), 422, "NaN"),
    "schema_version true": (_doc(_set("schema_version", True)), 422, "schema_version"),
    "NUL in a failure reason": (_doc(lambda d: d["results"][0].update(
        status="error", reason="boom\x00", samples=[], stats=None, correctness=None)), 422, "NUL"),
    "NUL in a device name": (_doc(_set("device.name", "gpu\x00")), 422, "NUL"),
    "a series id of 2^63 (settings)": (_put(f"/api/v1/series/{2**63}/settings", {"min_magnitude": 0.1}), 422,
                                       "series_id"),
    "a change point id of 2^63 (triage)": (
        lambda farm: post(farm.url, f"/api/v1/change-points/{2**63}/triage", json.dumps({"state": "noisy"}),
                          farm.admin), 422, "change_point_id"),
    "a series id of 2^64 (read)": (lambda farm: requests.get(f"{farm.url}/api/v1/series/{2**64}", timeout=10), 422,
                                   "series_id"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_input_is_refused_and_changes_nothing(farm: Farm, name: str) -> None:
    send, status, named = CASES[name]
    before = snapshot(farm.engine)
    response = send(farm)
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"].startswith("application/json"), response.text[:200]
    assert named in response.text, response.text[:500]
    assert snapshot(farm.engine) == before
