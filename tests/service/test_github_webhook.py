"""The GitHub webhook: signatures, which deliveries run, deduplication, fork trust, and the worker
that fetches, records and queues (paired runs for pull requests, history runs for pushes) — over
real HTTP on a service app, with hosted repositories as local bare git repositories."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import SecretStr
from sqlalchemy.engine import Engine

from pipeline.config import DispatchSettings, GitHubSettings, Settings
from pipeline.contracts import ContractError, DeviceClass, DeviceInfo
from pipeline.service.app import create_app
from pipeline.service.github_webhook import WebhookWorker, decide, sign, verify_signature
from pipeline.results.store import queue
from pipeline.results.store.db import session_scope
from pipeline.results.store.models import (
    BuildRequest,
    Commit,
    Job,
    Run,
    RunReport,
    WebhookDelivery,
)
from tests.helpers.github_webhooks import (
    SECRET,
    HostedRepo,
    deliver,
    pull_request_payload,
    push_payload,
)
from tests.helpers.live_server import live_server
from tests.helpers.stores import open_migrated
from tests.helpers.suite_repo import GemmCase, gemm_suite_files

CLASS = "test-cpu"
LABEL = "benchfarm:run"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Settings from the tests alone: no BENCHFARM_ variable of the caller's, files under tmp_path."""
    for key in list(os.environ):
        if key.startswith("BENCHFARM_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def test_signature_is_hmac_sha256_of_the_body() -> None:
    body = b'{"zen": "Keep it logically awesome."}'
    good = sign("s3cret", body)
    assert good.startswith("sha256=") and len(good) == 7 + 64
    assert verify_signature("s3cret", body, good)
    assert not verify_signature("s3cret", body + b" ", good)
    assert not verify_signature("other", body, good)
    assert not verify_signature("s3cret", body, None) and not verify_signature("s3cret", body, "sha1=abc")
    assert not verify_signature("", body, sign("", body)), "an empty secret verifies nothing"


def _pr(action: str = "opened", *, fork: bool = False, labels: tuple[str, ...] = (), label: str | None = None,
        state: str = "open") -> dict[str, Any]:
    head_repo = "someone/kernels" if fork else "acme/kernels"
    return {"action": action, "label": {"name": label} if label else None, "repository": {
        "full_name": "acme/kernels", "default_branch": "main", "clone_url": "/x/acme.git"},
        "pull_request": {"number": 7, "state": state, "labels": [{"name": n} for n in labels],
                         "head": {"sha": "a" * 40, "ref": "f", "repo": {"full_name": head_repo}},
                         "base": {"sha": "b" * 40, "ref": "main", "repo": {"full_name": "acme/kernels"}}}}


@pytest.mark.parametrize(("event", "payload", "kind", "reason"), [
    ("pull_request", _pr("opened"), "pull_request", "opened"),
    ("pull_request", _pr("synchronize"), "pull_request", "synchronize"),
    ("pull_request", _pr("reopened"), "pull_request", "reopened"),
    ("pull_request", _pr("closed", state="closed"), "ignore", "does not run"),
    ("pull_request", _pr("edited"), "ignore", "does not run"),
    ("pull_request", _pr("labeled", label="bug", labels=("bug",)), "ignore", "is not"),
    ("pull_request", _pr("labeled", label=LABEL, labels=(LABEL,)), "pull_request", "labeled"),
    ("pull_request", _pr("opened", fork=True), "ignore", "fork"),
    ("pull_request", _pr("synchronize", fork=True), "ignore", "fork"),
    ("pull_request", _pr("labeled", fork=True, label=LABEL, labels=(LABEL,)), "pull_request", "labeled"),
    ("pull_request", _pr("synchronize", fork=True, labels=(LABEL,)), "pull_request", "synchronize"),
    ("push", {"ref": "refs/heads/main", "after": "c" * 40, "repository": {"full_name": "acme/kernels",
                                                                           "default_branch": "main"}}, "push", "main"),
    ("push", {"ref": "refs/heads/topic", "after": "c" * 40, "repository": {"full_name": "acme/kernels",
                                                                            "default_branch": "main"}}, "ignore", "topic"),
    ("push", {"ref": "refs/heads/main", "after": "0" * 40, "deleted": True,
              "repository": {"full_name": "acme/kernels", "default_branch": "main"}}, "ignore", "deleted"),
    ("issues", {"action": "opened"}, "ignore", "does not run"),
    ("ping", {"zen": "hi"}, "ignore", "ping"),
])
def test_decide(event: str, payload: dict[str, Any], kind: str, reason: str) -> None:
    decision = decide(event, payload, GitHubSettings(trusted_label=LABEL))
    assert decision.kind == kind and reason in decision.reason
    if kind == "pull_request":
        assert (decision.repository, decision.pr, decision.head_sha, decision.base_sha) == (
            "acme/kernels", 7, "a" * 40, "b" * 40)


def _with(payload: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    *parents, last = path.split(".")
    where = payload
    for part in parents:
        where = where[part]
    where[last] = value
    return payload


@pytest.mark.parametrize(("event", "payload", "field"), [
    ("pull_request", _with(_pr(), "pull_request", [1]), "pull_request"),
    ("pull_request", _with(_pr(), "pull_request.number", True), "pull_request.number"),
    ("pull_request", _with(_pr(), "pull_request.labels", 3), "pull_request.labels"),
    ("pull_request", _with(_pr(), "pull_request.head.sha", {"x": 1}), "pull_request.head.sha"),
    ("pull_request", _with(_pr(), "pull_request.base.repo", "acme/kernels"), "pull_request.base.repo"),
    ("pull_request", _with(_pr(), "repository.full_name", "a" * 201), "repository.full_name"),
    ("push", {"ref": ["refs/heads/main"], "after": "c" * 40}, "ref"),
    ("push", {"ref": "refs/heads/main", "after": "c" * 40, "repository": [1]}, "repository"),
])
def test_decide_refuses_a_payload_without_githubs_types(event: str, payload: dict[str, Any], field: str) -> None:
    with pytest.raises(ContractError) as refused:
        decide(event, payload, GitHubSettings(trusted_label=LABEL))
    assert [f for f, _ in refused.value.errors] == [field]


# --- over HTTP, with the worker ---------------------------------------------------------------


@pytest.fixture
def hosted(tmp_path: Path) -> HostedRepo:
    return HostedRepo.create(tmp_path / "github", "acme/kernels", gemm_suite_files([GemmCase("alpha")]))


@pytest.fixture
def service(tmp_path: Path, hosted: HostedRepo) -> Iterator[tuple[str, Settings, Engine]]:
    checkout = hosted.clone(tmp_path / "service-checkout")
    settings = Settings(home=tmp_path / "home",
                        github=GitHubSettings(webhook_secret=SecretStr(SECRET), trusted_label=LABEL),
                        dispatch=DispatchSettings(suite_path=str(checkout / "kernels")))
    engine = open_migrated(settings.database_url)
    with session_scope(engine) as session:   # an agent with an online device of the class
        device_class = DeviceClass(name=CLASS, kind="cpu", targets=["llvm-cpu:x86_64"], runtime="iree",
                                   hal_driver="local-sync")
        queue.register_agent(session, name="agent-1", token_name="t", host="h", version="1", devices=[
            (device_class, DeviceInfo(device_class=CLASS, uid="cpu-0"))])
    with live_server(create_app(settings, engine)) as url:
        yield url, settings, engine
    engine.dispose()


def _drain(settings: Settings, engine: Engine) -> None:
    worker = WebhookWorker(settings, engine)
    while worker.step():
        pass


def _count(engine: Engine, model: Any) -> int:
    with session_scope(engine) as session:
        return int(session.scalar(sa.select(sa.func.count()).select_from(model)) or 0)


def _new_pull(hosted: HostedRepo, number: int = 7) -> tuple[str, str]:
    base = hosted.sha("main")
    head = hosted.commit("feature", gemm_suite_files([GemmCase("alpha", variant="slow")]), "slower tile")
    hosted.open_pull(number, "feature")
    return base, head


def test_unsigned_and_wrongly_signed_deliveries_are_refused_and_queue_nothing(
        service: tuple[str, Settings, Engine], hosted: HostedRepo) -> None:
    url, settings, engine = service
    base, head = _new_pull(hosted)
    payload = pull_request_payload(hosted, 7, action="opened", head_sha=head, head_ref="feature", base_sha=base)
    for answer in (deliver(url, "pull_request", payload, secret=None),
                   deliver(url, "pull_request", payload, secret="not-the-secret"),
                   deliver(url, "pull_request", payload, signature="sha256=" + "0" * 64),
                   deliver(url, "pull_request", payload, signature=sign(SECRET, b"another body"))):
        assert answer.status_code == 401, answer.text
    _drain(settings, engine)
    assert _count(engine, WebhookDelivery) == 0 and _count(engine, Run) == 0


def test_no_secret_configured_refuses_every_delivery(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    engine = open_migrated(settings.database_url)
    with live_server(create_app(settings, engine)) as url:
        answer = deliver(url, "push", {"ref": "refs/heads/main"}, secret="")
        assert answer.status_code == 401 and "BENCHFARM_GITHUB__WEBHOOK_SECRET" in answer.text
    assert _count(engine, WebhookDelivery) == 0


def test_other_events_are_answered_and_ignored(service: tuple[str, Settings, Engine]) -> None:
    url, settings, engine = service
    for event, payload in (("issues", {"action": "opened"}), ("ping", {"zen": "Design for failure."}),
                           ("push", {"ref": "refs/heads/topic", "after": "c" * 40,
                                     "repository": {"full_name": "acme/kernels", "default_branch": "main"}})):
        answer = deliver(url, event, payload)
        assert answer.status_code == 200 and answer.json()["status"] == "ignored", answer.text
    _drain(settings, engine)
    assert _count(engine, WebhookDelivery) == 3 and _count(engine, Run) == 0


def test_a_duplicate_delivery_is_processed_once(service: tuple[str, Settings, Engine], hosted: HostedRepo) -> None:
    url, settings, engine = service
    base, head = _new_pull(hosted)
    payload = pull_request_payload(hosted, 7, action="opened", head_sha=head, head_ref="feature", base_sha=base)
    first = deliver(url, "pull_request", payload, delivery="d-1")
    again = deliver(url, "pull_request", payload, delivery="d-1")
    assert first.status_code == 202 and again.status_code == 200 and again.json()["status"] == "duplicate"
    _drain(settings, engine)
    assert deliver(url, "pull_request", payload, delivery="d-1").json()["status"] == "duplicate"
    _drain(settings, engine)
    assert _count(engine, WebhookDelivery) == 1 and _count(engine, Run) == 1


def test_same_repository_pull_request_queues_one_paired_run(service: tuple[str, Settings, Engine],
                                                            hosted: HostedRepo) -> None:
    url, settings, engine = service
    base, head = _new_pull(hosted)
    answer = deliver(url, "pull_request", pull_request_payload(
        hosted, 7, action="opened", head_sha=head, head_ref="feature", base_sha=base))
    assert answer.status_code == 202, answer.text
    _drain(settings, engine)
    with session_scope(engine) as session:
        (delivery,) = session.scalars(sa.select(WebhookDelivery)).all()
        assert delivery.state == "done", delivery.outcome
        (run,) = session.scalars(sa.select(Run)).all()
        assert run.kind == "pr" and run.commit.sha == head and delivery.run_id == run.id
        assert [j.device_class.name for j in run.jobs] == [CLASS]
        build = session.scalar(sa.select(BuildRequest))
        assert build is not None and build.run_id == run.id and build.base_sha == base   # the merge base, built too
        report = session.scalar(sa.select(RunReport))
        assert report is not None and (report.pull_request, report.head_sha, report.base_sha, report.merge_base) == (
            7, head, base, base) and report.state == "waiting"
        commits = {c.sha: c for c in session.scalars(sa.select(Commit))}
        assert commits[head].pull_request == 7 and commits[base].branch == "main"


def test_fork_pull_request_runs_only_with_the_label(service: tuple[str, Settings, Engine], hosted: HostedRepo,
                                                    tmp_path: Path) -> None:
    url, settings, engine = service
    fork = HostedRepo.create(tmp_path / "forks", "someone/kernels", gemm_suite_files([GemmCase("alpha")]))
    base, head = _new_pull(hosted)   # GitHub keeps a fork's head under the base repository's refs/pull/N/head
    def payload(action: str, label: str | None = None, labels: tuple[str, ...] = ()) -> dict[str, Any]:
        return pull_request_payload(hosted, 7, action=action, head_sha=head, head_ref="feature", base_sha=base,
                                    fork=fork, label=label, labels=labels)

    for action in ("opened", "synchronize", "reopened"):
        answer = deliver(url, "pull_request", payload(action))
        assert answer.status_code == 200 and "fork" in answer.json()["reason"], answer.text
    answer = deliver(url, "pull_request", payload("labeled", "bug", ("bug",)))
    assert answer.status_code == 200 and answer.json()["status"] == "ignored"
    _drain(settings, engine)
    assert _count(engine, Run) == 0 and _count(engine, Job) == 0 and _count(engine, BuildRequest) == 0
    checkout = Path(settings.dispatch.suite_path).parent
    from tests.helpers.suite_repo import git
    with pytest.raises(RuntimeError):   # not even fetched
        git(checkout, "cat-file", "-e", f"{head}^{{commit}}")

    answer = deliver(url, "pull_request", payload("labeled", LABEL, ("bug", LABEL)))
    assert answer.status_code == 202, answer.text
    _drain(settings, engine)
    with session_scope(engine) as session:
        (run,) = session.scalars(sa.select(Run)).all()
        assert run.kind == "pr" and run.commit.sha == head and len(run.jobs) == 1


def test_a_new_head_supersedes_the_report_owed_for_the_old_one(service: tuple[str, Settings, Engine],
                                                                hosted: HostedRepo) -> None:
    url, settings, engine = service
    base, head = _new_pull(hosted)
    deliver(url, "pull_request", pull_request_payload(hosted, 7, action="opened", head_sha=head, head_ref="feature",
                                                      base_sha=base))
    newer = hosted.commit("feature", {"README.md": "more\n"}, "second push")
    hosted.open_pull(7, "feature")
    deliver(url, "pull_request", pull_request_payload(hosted, 7, action="synchronize", head_sha=newer,
                                                      head_ref="feature", base_sha=base))
    _drain(settings, engine)
    with session_scope(engine) as session:
        states = {r.head_sha: r.state for r in session.scalars(sa.select(RunReport))}
    assert states == {head: "superseded", newer: "waiting"}


def test_push_to_the_default_branch_feeds_the_history(service: tuple[str, Settings, Engine],
                                                      hosted: HostedRepo) -> None:
    url, settings, engine = service
    before = hosted.sha("main")
    after = hosted.commit("main", {"README.md": "hello\n"}, "docs")
    answer = deliver(url, "push", push_payload(hosted, before=before, after=after))
    assert answer.status_code == 202, answer.text
    _drain(settings, engine)
    with session_scope(engine) as session:
        (run,) = session.scalars(sa.select(Run)).all()
        assert run.kind == "push" and run.commit.sha == after
        assert {c.sha: c.branch for c in session.scalars(sa.select(Commit))} == {before: "main", after: "main"}
        build = session.scalar(sa.select(BuildRequest))
        assert build is not None and build.base_sha is None
        report = session.scalar(sa.select(RunReport))
        assert report is not None and report.pull_request is None and report.head_sha == after
