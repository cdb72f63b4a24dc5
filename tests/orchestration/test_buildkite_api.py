"""Creating Buildkite builds over real HTTP, against a local stand-in of Buildkite's REST API
(`POST /v2/organizations/{org}/pipelines/{pipeline}/builds`, Bearer token) that checks each request
against the documented shape: JSON with commit and branch (strings), optional message, env and
meta_data (objects of strings), pull_request_* fields; answers 201 with number and web_url.
Buildkite takes no Idempotency-Key: a 502 is reported, never sent again (`pipeline.http`)."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
from pydantic import SecretStr

from pipeline.config import (
    BuildkiteSettings,
    DispatchSettings,
    GitHubSettings,
    Settings,
)
from pipeline.contracts.ids import buildkite_job_ids
from pipeline.orchestration.buildkite_api import (
    BuildkiteError,
    configured,
    create_build,
)
from tests.helpers.cli_zygote import benchfarm_argv
from tests.helpers.farm import wait_for
from tests.helpers.github_webhooks import (
    SECRET,
    HostedRepo,
    deliver,
    pull_request_payload,
    push_payload,
)
from tests.helpers.json_standin import JsonStandIn
from tests.helpers.live_server import live_server
from tests.helpers.suite_repo import GemmCase, gemm_suite_files, git, make_suite_repo

TOKEN = "bkua_test_token"
ADMIN = "admin-token-for-the-deliveries-list"
DOCUMENTED = {"commit", "branch", "message", "env", "meta_data", "author", "clean_checkout", "ignore_pipeline_branch_filters",
              "pull_request_base_branch", "pull_request_id", "pull_request_repository"}


class BuildkiteStandIn:
    """Stands in for api.buildkite.com: one organization `acme`, one pipeline `kernels`."""

    def __init__(self) -> None:
        self.builds: list[dict[str, Any]] = []
        self.fail_next = 0   # the next requests answered 502 without being carried out
        self.lose_next = 0   # the next builds created, their answer lost on the way back (a 502)
        self.requests = 0
        self.peer = JsonStandIn(self._answer)
        self.url = self.peer.url

    def _answer(self, path: str, headers: Mapping[str, str], data: Any) -> tuple[int, dict[str, Any]]:
        self.requests += 1
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
        if self.lose_next:
            self.lose_next -= 1
            return 502, {"message": "Bad gateway"}
        return 201, {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"build/{number}")), "number": number,
                     "web_url": f"https://buildkite.com/acme/kernels/builds/{number}", "state": "scheduled",
                     "commit": data["commit"]}


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


def test_a_502_is_not_sent_again_and_a_refused_token_is_reported(buildkite: BuildkiteStandIn) -> None:
    """The build was created but its answer lost (a 502 from a proxy): one build, one request, and
    an error saying to look before triggering again; a refused token is named at once."""
    buildkite.lose_next = 1
    waits: list[float] = []
    with pytest.raises(BuildkiteError, match="answered HTTP 502 .* may have been created"):
        create_build(_settings(buildkite.url), commit="b" * 40, branch="main", message="m", sleep=waits.append)
    assert (buildkite.requests, len(buildkite.builds), waits) == (1, 1, [])
    buildkite.fail_next = 1
    with pytest.raises(BuildkiteError, match="answered HTTP 502"):
        create_build(_settings(buildkite.url), commit="b" * 40, branch="main", message="m", sleep=waits.append)
    assert (buildkite.requests, len(buildkite.builds), waits) == (2, 1, [])
    with pytest.raises(BuildkiteError, match="refused the API token .*HTTP 401.*write_builds"):
        create_build(_settings(buildkite.url, token="wrong"), commit="c" * 40, branch="main", message="m",
                     sleep=lambda s: None)
    assert create_build(_settings(buildkite.url), commit="c" * 40, branch="main", message="m",
                        sleep=lambda s: None).number == 2


def test_a_connection_refused_is_retried_with_back_off() -> None:
    """Nothing was sent when the connection could not be opened: retried, then reported."""
    waits: list[float] = []
    with pytest.raises(BuildkiteError, match="unreachable: .* after 4 attempts"):
        create_build(_settings("http://127.0.0.1:9"), commit="c" * 40, branch="main", message="m", sleep=waits.append)
    assert waits == [0.5, 1.0, 2.0]


def test_configured_needs_token_organization_and_pipeline() -> None:
    assert not configured(BuildkiteSettings())
    assert configured(_settings("http://x"))
    assert not configured(BuildkiteSettings(api_token=SecretStr(TOKEN), organization="acme"))


def test_a_webhook_delivery_becomes_a_buildkite_build(buildkite: BuildkiteStandIn, tmp_path: Any) -> None:
    """With Buildkite configured, the webhook worker's `process` creates a build of the pull
    request's head (no local jobs queued) and reports its number and URL."""
    import sqlalchemy as sa

    from pipeline.config import Settings
    from pipeline.service.github_webhook import Decision, process
    from pipeline.results.store.db import session_scope
    from pipeline.results.store.models import Run
    from tests.helpers.stores import open_migrated

    settings = Settings(home=tmp_path, buildkite=_settings(buildkite.url))
    engine = open_migrated(f"sqlite:///{tmp_path / 'store.db'}")
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


@contextmanager
def _service(settings: Settings) -> Iterator[str]:
    """The service's app with its loops, the webhook worker among them (as `benchfarm serve` runs them), on a
    fresh store."""
    from pipeline.service import runtime
    from pipeline.service.app import create_app
    from tests.helpers.stores import open_migrated

    engine = open_migrated(settings.database_url)
    try:
        with live_server(create_app(settings, engine, lifespan=runtime.lifespan)) as url:
            yield url
    finally:
        engine.dispose()


def _processed(url: str) -> dict[str, Any]:
    """The newest delivery once the worker has processed it, as the admin API reports it."""
    def done() -> dict[str, Any] | None:
        listed = requests.get(f"{url}/api/v1/webhooks/github/deliveries", headers={"Authorization": f"Bearer {ADMIN}"},
                              timeout=10)
        assert listed.status_code == 200, listed.text
        newest = listed.json()[0]
        return newest if newest["state"] != "pending" else None

    return wait_for(done, 30, "the delivery to be processed")


def test_signed_deliveries_to_the_service_become_buildkite_builds(buildkite: BuildkiteStandIn, tmp_path: Path) -> None:
    """End to end: GitHub's signed deliveries over HTTP to the running service; its webhook worker
    creates the Buildkite builds; a 502 fails the delivery (not sent again: the build may have been
    created), and a refused token is reported on the delivery."""
    hosted = HostedRepo("acme/kernels", bare=tmp_path / "acme-kernels.git", work=tmp_path / "work")   # never cloned
    head, base = "d" * 40, "e" * 40
    github = GitHubSettings(webhook_secret=SecretStr(SECRET))
    settings = Settings(home=tmp_path / "home", api_token=SecretStr(ADMIN), github=github,
                        buildkite=_settings(buildkite.url))
    buildkite.fail_next = 1   # Buildkite answers 502 once: the delivery fails, nothing is sent again
    payload = pull_request_payload(hosted, 7, action="opened", head_sha=head, head_ref="faster-gemm", base_sha=base)
    with _service(settings) as url:
        assert deliver(url, "pull_request", payload).status_code == 202
        delivery = _processed(url)
        assert delivery["state"] == "failed" and "answered HTTP 502" in delivery["outcome"], delivery
        assert buildkite.requests == 1 and buildkite.builds == []
        answer = deliver(url, "pull_request", payload)   # delivered again (GitHub's redeliver)
        assert answer.status_code == 202, answer.text
        delivery = _processed(url)
        assert delivery["state"] == "done" and delivery["run_id"] is None, delivery   # nothing queued locally
        assert delivery["outcome"] == "Buildkite build 1 of dddddddddd: https://buildkite.com/acme/kernels/builds/1"
        assert deliver(url, "push", push_payload(hosted, before=base, after=head)).status_code == 202
        assert _processed(url)["outcome"].startswith("Buildkite build 2 of dddddddddd")
    assert buildkite.requests == 3   # the 502, then the two builds
    pull, push = buildkite.builds
    assert (pull["commit"], pull["branch"], pull["pull_request_id"], pull["pull_request_base_branch"]) == (
        head, "faster-gemm", 7, "main")
    assert pull["meta_data"] == {"benchfarm-kind": "pull_request", "benchfarm-base": base}
    assert (push["commit"], push["branch"], push["meta_data"]["benchfarm-kind"]) == (head, "main", "push")
    assert "pull_request_id" not in push

    refused = settings.model_copy(update={"home": tmp_path / "home-2",
                                          "buildkite": _settings(buildkite.url, token="bkua_revoked")})
    with _service(refused) as url:
        assert deliver(url, "push", push_payload(hosted, before=base, after=head)).status_code == 202
        delivery = _processed(url)
    assert delivery["state"] == "failed", delivery
    assert delivery["outcome"].startswith("Buildkite refused the API token (HTTP 401") and "write_builds" in delivery[
        "outcome"], delivery
    assert len(buildkite.builds) == 2


def test_benchfarm_trigger_creates_a_buildkite_build_of_the_run(buildkite: BuildkiteStandIn, tmp_path: Path) -> None:
    """With Buildkite configured, an ad-hoc run (`benchfarm trigger` -> POST /api/v1/runs) is a Buildkite
    build whose environment names its classes, cases and kind; the run and job ids answered are those
    its run-job steps use (so the run page and the ad-hoc form find them); nothing is queued here."""
    repo = make_suite_repo(tmp_path, gemm_suite_files([GemmCase("alpha")]), name="kernels-repo")
    sha = git(repo, "rev-parse", "HEAD")
    settings = Settings(home=tmp_path / "home", api_token=SecretStr(ADMIN), buildkite=_settings(buildkite.url),
                        dispatch=DispatchSettings(suite_path=str(repo / "kernels")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    with _service(settings) as url:
        done = subprocess.run([*benchfarm_argv(), "trigger", "--ref", "HEAD", "--device-class",
                               "nvidia-h100-sxm,cpu-x86_64", "--cases", "gemm/*", "--server", url, "--token", ADMIN],
                              env={**env, "BENCHFARM_HOME": str(tmp_path / "cli")}, capture_output=True, text=True,
                              timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert requests.get(f"{url}/api/v1/runs", timeout=10).json() == []   # the built-in dispatcher has nothing
        bad = requests.post(f"{url}/api/v1/runs", json={"ref": "HEAD", "device_classes": ["No Such Class"]},
                            headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
        assert bad.status_code == 422 and "device_classes" in bad.text, bad.text
    (sent,) = buildkite.builds
    assert (sent["commit"], sent["branch"], sent["meta_data"]) == (sha, "main", {"benchfarm-kind": "adhoc"})
    assert sent["env"] == {"BENCHFARM_REPOSITORY": "kernels-repo", "BENCHFARM_PIPELINE_KIND": "adhoc",
                           "BENCHFARM_PIPELINE_DEVICE_CLASSES": "nvidia-h100-sxm,cpu-x86_64",
                           "BENCHFARM_PIPELINE_CASES": "gemm/*"}
    build_id = str(uuid.uuid5(uuid.NAMESPACE_URL, "build/1"))
    (run_id, h100_job), (_, cpu_job) = (buildkite_job_ids(build_id, dc) for dc in ("nvidia-h100-sxm", "cpu-x86_64"))
    lines = done.stdout.splitlines()
    assert lines[0] == f"Buildkite build 1 of kernels-repo@{sha[:10]}: https://buildkite.com/acme/kernels/builds/1"
    assert lines[1].startswith(f"run {run_id} ") and f"job {h100_job} on nvidia-h100-sxm" in done.stdout
    assert f"job {cpu_job} on cpu-x86_64" in done.stdout
