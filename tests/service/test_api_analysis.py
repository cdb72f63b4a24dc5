"""Analysis over real HTTP on both stores: commits, compare, series with change points, regressions,
triage (user scope) and the dashboard."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from sqlalchemy import Engine

from pipeline.config import Settings
from pipeline.service import auth
from pipeline.service.app import create_app
from pipeline.results.store import ingest
from pipeline.results.store.db import session_scope
from tests.helpers.live_server import live_server

from tests.helpers import factories as f
from tests.helpers.http_client import post, snapshot
from tests.results.store.test_analysis import copied_stepped, main  # noqa: F401  (copied_stepped: the fixture)


@pytest.fixture
def service(copied_stepped: Engine, tmp_path: Any) -> Iterator[tuple[str, Engine, dict[str, str]]]:  # noqa: F811
    with session_scope(copied_stepped) as s:
        tokens = {scope: auth.create_token(s, name=f"{scope}-token", scopes=[scope]) for scope in auth.SCOPES}
    with live_server(create_app(Settings(home=tmp_path, api_token="bootstrap"), copied_stepped)) as url:
        yield url, copied_stepped, tokens


def _get(url: str, path: str, **params: Any) -> Any:
    response = requests.get(url + path, params=params, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def test_commits_are_listed_and_shown(service: tuple[str, Engine, dict[str, str]]) -> None:
    url, engine, _ = service
    listed = _get(url, "/api/v1/commits", repository=f.REPO, branch="main", limit=5)
    assert [c["sha"] for c in listed] == [f.sha(main(i)) for i in (59, 58, 57, 56, 55)]
    one = _get(url, f"/api/v1/commits/{f.sha(main(20))}")
    assert one["parents"] == [f.sha(main(19))] and one["on_default_branch"] and len(one["runs"]) == 1
    assert requests.get(f"{url}/api/v1/commits/{'e' * 40}", timeout=10).status_code == 404
    assert _get(url, f"/api/v1/commits/{f.sha(main(20))[:10]}") == one   # the prefix the terminal prints
    with session_scope(engine) as s:
        ingest.record_commits(s, repository=f.REPO, commits=[f.commit(161), f.commit(244)])  # both 0159...
    several = requests.get(f"{url}/api/v1/commits/0159", timeout=10)
    assert several.status_code == 409 and "names several recorded commits" in several.json()["error"]


def test_series_regressions_triage_and_dashboard(service: tuple[str, Engine, dict[str, str]]) -> None:
    url, engine, tokens = service
    (regression,) = _get(url, "/api/v1/regressions")
    assert (regression["before_sha"], regression["after_sha"]) == (f.sha(main(19)), f.sha(main(20)))
    series = _get(url, f"/api/v1/series/{regression['series_id']}")
    assert [cp["direction"] for cp in series["change_points"]] == ["regression", "improvement"]
    assert len(series["history"]) == 60 and series["settings"]["lower_is_better"] is True
    assert series["baseline"] is None
    assert _get(url, "/api/v1/dashboard")["counts"] == {"regressed": 1, "suspected": 0, "improved": 0, "stable": 0,
                                                       "no data": 0}

    path = f"/api/v1/change-points/{regression['id']}/triage"
    before = snapshot(engine)
    assert post(url, path, json.dumps({"state": "noisy"}), None).status_code == 401
    refused = post(url, path, json.dumps({"state": "noisy"}), tokens["agent"])
    assert refused.status_code == 403 and "user" in refused.json()["error"]
    no_link = post(url, path, json.dumps({"state": "confirmed"}), tokens["user"])
    assert no_link.status_code == 422 and "bug_link" in no_link.json()["error"]
    bad_state = post(url, path, json.dumps({"state": "gone"}), tokens["user"])
    assert bad_state.status_code == 422
    assert snapshot(engine)["triage_events"] == before["triage_events"]

    confirmed = post(url, path, json.dumps({"state": "confirmed", "bug_link": "https://bugs.example/42"}),
                     tokens["user"])
    assert confirmed.status_code == 200, confirmed.text
    body = confirmed.json()
    assert body["state"] == "confirmed" and body["events"][-1]["who"] == "user-token"
    assert body["events"][-1]["bug_link"] == "https://bugs.example/42"
    assert _get(url, f"/api/v1/change-points/{regression['id']}")["state"] == "confirmed"
    assert [r["id"] for r in _get(url, "/api/v1/regressions", state="confirmed")] == [regression["id"]]
    assert _get(url, "/api/v1/regressions", device_class="other-cpu") == []
    missing = post(url, "/api/v1/change-points/99999/triage", json.dumps({"state": "noisy"}), tokens["user"])
    assert missing.status_code == 404

    improvement = series["change_points"][1]["id"]
    intended = post(url, f"/api/v1/change-points/{improvement}/triage", json.dumps({"state": "intended"}),
                    tokens["admin"])
    assert intended.status_code == 200
    assert _get(url, "/api/v1/regressions") == []
    board = _get(url, "/api/v1/dashboard")
    assert board["counts"]["stable"] == 1
    assert [(g["family"], g["device_class"], g["counts"]["stable"]) for g in board["groups"]] == [
        ("gemm", f.DEVICE_CLASS, 1)]
    assert _get(url, f"/api/v1/series/{regression['series_id']}")["baseline"]["sha"] == f.sha(main(40))


def test_series_settings_need_the_user_scope(service: tuple[str, Engine, dict[str, str]]) -> None:
    url, _, tokens = service
    series_id = _get(url, "/api/v1/series")[0]["id"]
    path = f"/api/v1/series/{series_id}/settings"
    headers = {"authorization": f"Bearer {tokens['agent']}"}
    assert requests.put(url + path, json={"min_magnitude": 0.5}, headers=headers, timeout=10).status_code == 403
    headers = {"authorization": f"Bearer {tokens['user']}"}
    response = requests.put(url + path, json={"min_magnitude": 0.5, "lower_is_better": False}, headers=headers,
                            timeout=10)
    assert response.status_code == 200, response.text
    assert response.json()["settings"] == {"min_magnitude": 0.5, "lower_is_better": False,
                                           "lower_is_better_override": False}


def test_compare_over_http_with_and_without_a_device_class(service: tuple[str, Engine, dict[str, str]]) -> None:
    url, engine, _ = service
    with session_scope(engine) as s:
        from pipeline.results.store import ingest

        ingest.record_commits(s, repository=f.REPO, commits=[f.commit("pr", main(59), minutes=300, branch="feature")])
        f.upload(s, "pr", [f.ok(f.GEMM, f.series_samples(2e-3))], kind="pr")
    every = _get(url, "/api/v1/compare", repository=f.REPO, head=f.sha("pr"))
    assert every["verdict"] == "regressed" and every["errored"] == 0
    (one,) = every["comparisons"]
    assert (one["base_sha"], one["merge_base"], one["base_source"]) == (f.sha(main(59)), f.sha(main(59)), "merge base")
    assert one["rows"][0]["status"] == "regressed" and one["rows"][0]["paired"] is False
    single = _get(url, "/api/v1/compare", repository=f.REPO, head=f.sha("pr"), device_class=f.DEVICE_CLASS)
    assert single["comparisons"][0]["rows"] == one["rows"]
    assert "/api/v1/compare" in _get(url, "/openapi.json")["paths"]
