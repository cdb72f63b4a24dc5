"""The service over real HTTP on loopback, on both stores: reads, uploads, refusals, escaping."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from sqlalchemy import Engine

from pipeline.config import Settings
from pipeline.service.app import create_app
from pipeline.results.store import ingest
from pipeline.results.store.db import session_scope
from tests.helpers.live_server import live_server

from tests.helpers import factories as f

TOKEN = "test-token-1234"


@pytest.fixture
def service(seeded: Engine, tmp_path: Any) -> Iterator[tuple[str, Engine]]:
    settings = Settings(home=tmp_path, api_token=TOKEN, max_upload_bytes=64 * 1024)
    with live_server(create_app(settings, seeded)) as url:
        yield url, seeded


def _new_run(engine: Engine, label: int = 1) -> tuple[str, str]:
    with session_scope(engine) as s:
        run = ingest.create_run(s, repository=f.REPO, commit_sha=f.sha(label), kind="local",
                                device_classes=[f.DEVICE_CLASS])
        return run.id, run.jobs[0].id


def _post(url: str, body: bytes | str, token: str | None = TOKEN) -> requests.Response:
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    return requests.post(f"{url}/api/v1/results", data=body, headers=headers, timeout=30)


def _document(run_id: str, job_id: str, label: int = 1, **case: Any) -> dict[str, Any]:
    doc = f.result_document(run_id=run_id, job_id=job_id, commit_sha=f.sha(label),
                            results=[f.ok(f.GEMM, f.series_samples(1e-3))])
    data = json.loads(doc.model_dump_json())
    data["results"][0].update(case)
    return data


def _snapshot(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    with session_scope(engine) as s:
        return f.snapshot(s)


def test_health_names_the_store(service: tuple[str, Engine]) -> None:
    url, engine = service
    body = requests.get(f"{url}/api/v1/health", timeout=10).json()
    assert body["status"] == "ok"
    assert body["database"] == engine.dialect.name


def test_upload_is_stored_once_and_served(service: tuple[str, Engine]) -> None:
    url, engine = service
    run_id, job_id = _new_run(engine)
    body = json.dumps(_document(run_id, job_id))
    first = _post(url, body)
    assert first.status_code == 200, first.text
    assert first.json()["stored"] == 1
    again = _post(url, body)
    assert again.status_code == 200
    assert again.json() == {"job_id": job_id, "stored": 0, "duplicates": 1, "samples": 0}
    with session_scope(engine) as s:
        assert f.sample_count(s) == 10

    runs = requests.get(f"{url}/api/v1/runs", timeout=10).json()
    assert [r["id"] for r in runs] == [run_id]
    series = requests.get(f"{url}/api/v1/series", timeout=10).json()
    assert [s["case_id"] for s in series] == [f.GEMM]
    history = requests.get(f"{url}/api/v1/series/{series[0]['id']}", timeout=10).json()["history"]
    assert [p["sha"] for p in history] == [f.sha(1)]
    assert history[0]["median"] == pytest.approx(1e-3)


def test_answers_and_openapi_carry_a_case_id_as_its_text(service: tuple[str, Engine]) -> None:
    """The store hands out CaseId objects; the API answers with their text, and describes a string."""
    url, engine = service
    run_id, job_id = _new_run(engine)
    assert _post(url, json.dumps(_document(run_id, job_id))).status_code == 200
    run = requests.get(f"{url}/api/v1/runs/{run_id}", timeout=10).json()
    assert [r["case_id"] for c in run["comparisons"] for r in c["rows"]] == [f.GEMM]
    compared = requests.get(f"{url}/api/v1/compare", params={"repository": f.REPO, "head": f.sha(1)}, timeout=10)
    assert [r["case_id"] for c in compared.json()["comparisons"] for r in c["rows"]] == [f.GEMM], compared.text
    dashboard = requests.get(f"{url}/api/v1/dashboard", timeout=10).json()
    assert [s["case_id"] for g in dashboard["groups"] for s in g["series"]] == [f.GEMM]

    schemas = requests.get(f"{url}/openapi.json", timeout=10).json()["components"]["schemas"]
    assert "CaseId" not in schemas
    described = {(name, key): schema["properties"][key] for name, schema in schemas.items()
                 for key in ("case_id", "control_case") if key in schema.get("properties", {})}
    assert len(described) >= 8, described
    for (name, key), prop in described.items():
        types = [prop.get("type")] if "type" in prop else [option["type"] for option in prop["anyOf"]]
        assert types in (["string"], ["string", "null"]) and "$ref" not in json.dumps(prop), (name, key, prop)


@pytest.mark.parametrize(
    ("case_fields", "raw", "status", "named"),
    [
        ({"samples": [1e-3] * 9 + [-1e-3]}, None, 422, "results.0.samples.9"),
        ({"samples": [1e-3] * 9 + ["slow"]}, None, 422, "results.0.samples.9"),
        ({"case": "gemm/unknown/1x1x1/f32/iree"}, None, 422, "results.0.case: unknown case"),
        ({}, '{"schema_version": 99}', 422, "unknown schema version 99"),
        ({}, "{not json", 422, "not JSON"),
        ({}, None, 413, "request body over"),
    ],
)
def test_bad_upload_is_refused_and_changes_nothing(
    service: tuple[str, Engine], case_fields: dict[str, Any], raw: str | None, status: int, named: str
) -> None:
    url, engine = service
    run_id, job_id = _new_run(engine)
    doc = _document(run_id, job_id, **case_fields)
    body = raw if raw is not None else json.dumps(doc)
    if status == 413:
        doc["results"][0]["samples"] = [1e-3] * 10_000
        doc["results"][0]["stats"]["n"] = 10_000
        body = json.dumps(doc)
    before = _snapshot(engine)
    response = _post(url, body)
    assert response.status_code == status, response.text
    assert named in response.text
    assert response.headers["content-type"].startswith("application/json")
    assert _snapshot(engine) == before


def test_nan_in_json_is_refused(service: tuple[str, Engine]) -> None:
    url, engine = service
    run_id, job_id = _new_run(engine)
    body = json.dumps(_document(run_id, job_id, samples=[1e-3] * 9 + [float("nan")]))
    assert "NaN" in body
    response = _post(url, body)
    assert response.status_code == 422
    assert any(e["field"] == "results.0.samples.9" for e in response.json()["errors"])


@pytest.mark.parametrize(("token", "status"), [(None, 401), ("wrong-token", 401)])
def test_upload_needs_the_token(service: tuple[str, Engine], token: str | None, status: int) -> None:
    url, engine = service
    run_id, job_id = _new_run(engine)
    before = _snapshot(engine)
    response = _post(url, json.dumps(_document(run_id, job_id)), token=token)
    assert response.status_code == status
    assert "token" in response.json()["error"]
    assert _snapshot(engine) == before


def test_writes_are_off_without_a_configured_token(seeded: Engine, tmp_path: Any) -> None:
    with live_server(create_app(Settings(home=tmp_path), seeded)) as url:
        response = _post(url, "{}", token="anything")
    assert response.status_code == 403
    assert "BENCHFARM_API_TOKEN" in response.json()["error"]


def test_unknown_things_are_404_with_a_json_body(service: tuple[str, Engine]) -> None:
    url, _ = service
    for path in ("/api/v1/runs/nope", "/api/v1/series/999999"):
        response = requests.get(url + path, timeout=10)
        assert response.status_code == 404, path
        assert "no " in response.json()["error"]
    for path in ("/runs/nope", "/series/999999"):   # pages: an HTML page with the navigation
        response = requests.get(url + path, timeout=10)
        assert response.status_code == 404 and response.headers["content-type"].startswith("text/html"), path
    response = requests.get(f"{url}/api/v1/compare", params={
        "repository": f.REPO, "head": "f" * 40, "device_class": f.DEVICE_CLASS}, timeout=10)
    assert response.status_code == 404


def test_compare_takes_the_sha_prefixes_people_copy(service: tuple[str, Engine]) -> None:
    """The terminal and the PR comment show 10 hex digits, `git log --oneline` 7: the API takes any
    prefix of 4 or more that names one recorded commit, and says so when it names none or several."""
    url, engine = service
    with session_scope(engine) as s:
        f.run_and_upload(s, 1, [f.ok(f.GEMM, f.series_samples(1e-3))])
        f.run_and_upload(s, 2, [f.ok(f.GEMM, f.series_samples(1e-3))])
        ingest.record_commits(s, repository=f.REPO, commits=[f.commit(161), f.commit(244)])  # both 0159...

    def compare(**refs: str) -> requests.Response:
        return requests.get(f"{url}/api/v1/compare", params={"repository": f.REPO, **refs}, timeout=10)

    short = compare(head=f.sha(2)[:10].upper(), base=f.sha(1)[:7])
    assert short.status_code == 200, short.text
    body = short.json()
    assert body["head_sha"] == f.sha(2) and [c["base_sha"] for c in body["comparisons"]] == [f.sha(1)]
    assert body == compare(head=f.sha(2), base=f.sha(1)).json()

    unknown = compare(head="abcdef12")
    assert unknown.status_code == 404 and "no recorded commit of" in unknown.json()["error"], unknown.text
    several = compare(head=f.sha(2), base="0159")
    assert several.status_code == 404 and "names several recorded commits" in several.json()["error"]
    assert f.sha(161)[:12] in several.json()["error"] and f.sha(244)[:12] in several.json()["error"]
    one = compare(head="0159a")   # resolved to 161's sha, which has no results to judge
    assert f.sha(161) in one.text and "names several" not in one.text, one.text


def test_pages_show_runs_series_and_comparison(service: tuple[str, Engine]) -> None:
    url, engine = service
    with session_scope(engine) as s:
        f.run_and_upload(s, 1, [f.ok(f.GEMM, f.series_samples(1e-3))])
        run_id, _ = f.run_and_upload(s, 2, [f.ok(f.GEMM, f.series_samples(2e-3))])
    index = requests.get(url + "/", timeout=10).text
    assert run_id[:12] in index and f.GEMM in index
    run_page = requests.get(f"{url}/runs/{run_id}", timeout=10).text
    assert "regressed" in run_page and "+100.0 % [" in run_page
    detail = requests.get(f"{url}/api/v1/runs/{run_id}", timeout=10).json()
    (comparison,) = detail["comparisons"]
    assert comparison["base_sha"] == f.sha(1)
    assert [r["status"] for r in comparison["rows"]] == ["regressed"]
    (row,) = comparison["rows"]
    assert row["ci_low"] <= row["change"] <= row["ci_high"] and row["change"] == pytest.approx(1.0)
    # a fresh series (no learned run-to-run noise): 3 x sqrt(2) x the assumed 3 % of one run
    assert row["threshold"] == pytest.approx(3 * math.sqrt(2) * 0.03) and row["same_binary"] is False
    series_id = requests.get(f"{url}/api/v1/series", timeout=10).json()[0]["id"]
    series_page = requests.get(f"{url}/series/{series_id}", timeout=10).text
    assert 'data-points="2"' in series_page  # the graph's points (drawn by uPlot in the browser)


def test_html_in_names_is_shown_as_text(seeded: Engine, tmp_path: Any) -> None:
    evil = "<script>alert(1)</script>"
    with session_scope(seeded) as s:
        ingest.upsert_repository(s, name=evil)
        ingest.record_commits(s, repository=evil, commits=[f.commit(9)])
        ingest.create_run(s, repository=evil, commit_sha=f.sha(9), kind="local", device_classes=[f.DEVICE_CLASS])
    with live_server(create_app(Settings(home=tmp_path), seeded)) as url:
        page = requests.get(url + "/", timeout=10).text
    assert evil not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
