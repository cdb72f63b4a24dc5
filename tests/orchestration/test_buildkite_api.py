"""Creating Buildkite builds over real HTTP, against a local stand-in of Buildkite's REST API
(`POST /v2/organizations/{org}/pipelines/{pipeline}/builds`, Bearer token) that checks each request
against the documented shape: JSON with commit and branch (strings), optional message, env and
meta_data (objects of strings), pull_request_* fields; answers 201 with number and web_url."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from pydantic import SecretStr

from pipeline.config import BuildkiteSettings
from pipeline.orchestration.buildkite_api import (
    BuildkiteError,
    configured,
    create_build,
)
from tests.helpers.json_standin import JsonStandIn

TOKEN = "bkua_test_token"
DOCUMENTED = {"commit", "branch", "message", "env", "meta_data", "author", "clean_checkout", "ignore_pipeline_branch_filters",
              "pull_request_base_branch", "pull_request_id", "pull_request_repository"}


class BuildkiteStandIn:
    """Stands in for api.buildkite.com: one organization `acme`, one pipeline `kernels`."""

    def __init__(self) -> None:
        self.builds: list[dict[str, Any]] = []
        self.fail_next = 0
        self.peer = JsonStandIn(self._answer)
        self.url = self.peer.url

    def _answer(self, path: str, headers: Mapping[str, str], data: Any) -> tuple[int, dict[str, Any]]:
        if self.fail_next:
            self.fail_next -= 1
            return 502, {"message": "Bad gateway"}
        if headers.get("Authorization") != f"Bearer {TOKEN}":
            return 401, {"message": "Authentication required. Please supply a valid API Access Token"}
        if path != "/v2/organizations/acme/pipelines/kernels/builds":
            return 404, {"message": "No pipeline found"}
        problems = [k for k in data if k not in DOCUMENTED]
        problems += [k for k in ("commit", "branch") if not isinstance(data.get(k), str) or not data[k]]
        problems += [k for k in ("env", "meta_data") if k in data and not (
            isinstance(data[k], dict) and all(isinstance(v, str) for v in data[k].values()))]
        if problems:
            return 422, {"message": f"Validation failed: {', '.join(problems)}"}
        self.builds.append(data)
        number = len(self.builds)
        return 201, {"number": number, "web_url": f"https://buildkite.com/acme/kernels/builds/{number}",
                     "state": "scheduled", "commit": data["commit"]}


@pytest.fixture
def buildkite() -> Iterator[BuildkiteStandIn]:
    stand_in = BuildkiteStandIn()
    yield stand_in
    stand_in.peer.close()


def _settings(url: str, token: str = TOKEN) -> BuildkiteSettings:
    return BuildkiteSettings(api_url=url, api_token=SecretStr(token), organization="acme", pipeline="kernels")


def test_a_build_is_created_with_the_documented_body(buildkite: BuildkiteStandIn) -> None:
    build = create_build(_settings(buildkite.url), commit="a" * 40, branch="feature", message="benchfarm: pr",
                         env={"BENCHFARM_REPOSITORY": "acme/kernels"}, meta_data={"benchfarm-kind": "pull_request"},
                         pull_request={"id": 7, "base_branch": "main"}, sleep=lambda s: None)
    assert build.number == 1 and build.web_url.endswith("/builds/1")
    (sent,) = buildkite.builds
    assert sent["commit"] == "a" * 40 and sent["pull_request_id"] == 7 and sent["env"]["BENCHFARM_REPOSITORY"]


def test_5xx_is_retried_and_a_refused_token_is_reported(buildkite: BuildkiteStandIn) -> None:
    buildkite.fail_next = 2
    waits: list[float] = []
    assert create_build(_settings(buildkite.url), commit="b" * 40, branch="main", message="m",
                        sleep=waits.append).number == 1
    assert waits == [0.5, 1.0]
    with pytest.raises(BuildkiteError, match="refused the API token .*HTTP 401.*write_builds"):
        create_build(_settings(buildkite.url, token="wrong"), commit="c" * 40, branch="main", message="m",
                     sleep=lambda s: None)
    buildkite.fail_next = 10
    with pytest.raises(BuildkiteError, match="unreachable .* after 4 attempts; last: HTTP 502"):
        create_build(_settings(buildkite.url), commit="c" * 40, branch="main", message="m", sleep=lambda s: None)
    assert len(buildkite.builds) == 1


def test_configured_needs_token_organization_and_pipeline() -> None:
    assert not configured(BuildkiteSettings())
    assert configured(_settings("http://x"))
    assert not configured(BuildkiteSettings(api_token=SecretStr(TOKEN), organization="acme"))


def test_a_webhook_delivery_becomes_a_buildkite_build(buildkite: BuildkiteStandIn, tmp_path: Any) -> None:
    """With Buildkite configured, the webhook worker's `process` creates a build of the pull
    request's head (no local jobs queued) and reports its number and URL."""
    import sqlalchemy as sa

    from pipeline.config import Settings
    from pipeline.pr_comments.webhook import Decision, process
    from pipeline.store.db import open_store, session_scope
    from pipeline.store.models import Run

    settings = Settings(home=tmp_path, buildkite=_settings(buildkite.url))
    engine = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    decision = Decision(kind="pull_request", reason="opened", repository="acme/kernels", pr=7, head_sha="d" * 40,
                        head_ref="faster-gemm", base_sha="e" * 40, base_ref="main", default_branch="main",
                        head_clone_url="https://github.com/acme/kernels.git")
    with session_scope(engine) as session:
        run_id, outcome = process(session, settings, decision)
        assert session.scalar(sa.select(sa.func.count()).select_from(Run)) == 0
    engine.dispose()
    assert run_id is None and outcome.startswith("Buildkite build 1 of dddddddddd")
    (sent,) = buildkite.builds
    assert (sent["commit"], sent["branch"], sent["pull_request_id"]) == ("d" * 40, "faster-gemm", 7)
    assert sent["meta_data"] == {"benchfarm-kind": "pull_request", "benchfarm-base": "e" * 40}
