"""GitHub webhooks, an inbound trigger of runs: which deliveries run benchmarks, and running them
through the built-in dispatcher or Buildkite (hence here in the service, above both, as the ad-hoc
trigger of `api.routes.jobs`).

Receiving (`pipeline.service.api.routes.webhooks`) is quick and does no git work: the signature
is checked (`verify_signature`), the delivery is looked up by its X-GitHub-Delivery id (a
redelivery is answered and not processed again), `decide` says what the event asks for, and the
delivery is stored, pending or ignored. `WebhookWorker`, a service thread, then processes pending
deliveries one at a time (`process`):

- a pull request (opened, synchronize, reopened; labeled with `github.trusted_label`): fetch its
  head and base into the service's suite checkout (`git fetch <remote> refs/pull/N/head`, from
  `github.fetch_remote`, else the payload's clone URLs), record the commits (the base branch's
  first parents with their branch when it is the default branch), compute the merge base, choose
  the base: the newest first-parent ancestor of the merge base (itself included) with results on
  every device class of the run, else the merge base itself; queue one paired run (one job per
  device class, head and base bundles interleaved on each device) and a report owed when it ends.
  A later push to the pull request supersedes the report still owed for an older head;
- a push to the default branch: record its first-parent history with the branch (what feeds the
  history), queue a run, and a report (a commit status or check run, no comment).

Trust: a pull request whose head repository is not the base repository (a fork) runs on devices
only while it carries `github.trusted_label`; before that nothing is fetched, built or queued.
The label is read from each delivery's payload, so a fork's later pushes run as long as the
label stays on (a maintainer removes it to stop that).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from pipeline.config import GitHubSettings, Settings
from pipeline.contracts import ContractError
from pipeline.contracts.limits import Int
from pipeline.orchestration.dispatch import triggers
from pipeline.loops import Loop
from pipeline.results.store import deliveries, farm, ingest, reports
from pipeline.results.store.compare import choose_base
from pipeline.results.store.db import Engine, Session, session_scope

__all__ = ["PR_ACTIONS", "Decision", "Payload", "WebhookError", "WebhookWorker", "decide", "process", "read_payload",
           "sign", "verify_signature"]

log = logging.getLogger(__name__)

PR_ACTIONS = ("opened", "synchronize", "reopened", "labeled")
ZERO_SHA = "0" * 40


class WebhookError(RuntimeError):
    """A delivery that could not be processed; the message says why (stored as its outcome)."""


def sign(secret: str, body: bytes) -> str:
    """The X-Hub-Signature-256 value GitHub sends for `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_signature(secret: str, body: bytes, header: str | None) -> bool:
    """Whether `header` is the HMAC-SHA256 of `body` with `secret` (compared in constant time); an
    empty secret verifies nothing."""
    if not secret or not header:
        return False
    return hmac.compare_digest(sign(secret, body).encode(), header.strip().encode())


@dataclass(frozen=True)
class Decision:
    """What a delivery asks for: `kind` pull_request / push / ignore, and why."""

    kind: str
    reason: str
    repository: str = ""
    pr: int | None = None
    head_sha: str = ""
    head_ref: str = ""
    head_clone_url: str = ""
    base_sha: str = ""
    base_ref: str = ""
    clone_url: str = ""
    default_branch: str = "main"


def _ignore(reason: str) -> Decision:
    return Decision("ignore", reason)


class GitHubRepository(BaseModel):
    full_name: str | None = Field(None, max_length=200)
    clone_url: str | None = Field(None, max_length=1000)
    default_branch: str | None = Field(None, max_length=300)


class GitHubLabel(BaseModel):
    name: str | None = Field(None, max_length=300)


class PullRequestEnd(BaseModel):
    sha: str | None = Field(None, max_length=64)
    ref: str | None = Field(None, max_length=300)
    repo: GitHubRepository | None = None


class PullRequest(BaseModel):
    number: Int | None = None
    state: str | None = Field(None, max_length=50)
    labels: list[GitHubLabel] | None = None
    head: PullRequestEnd | None = None
    base: PullRequestEnd | None = None


class Payload(BaseModel):
    """What `decide` reads of a `pull_request` or `push` delivery (GitHub's payloads carry much more,
    not read: ignored here, kept as sent). A signed payload whose fields are not these types is
    refused (ContractError naming the field), never half read."""

    action: str | None = Field(None, max_length=50)
    number: Int | None = None
    pull_request: PullRequest | None = None
    repository: GitHubRepository | None = None
    label: GitHubLabel | None = None
    ref: str | None = Field(None, max_length=300)
    after: str | None = Field(None, max_length=64)
    deleted: bool | None = None


def read_payload(payload: dict[str, Any]) -> Payload:
    """The fields `decide` reads, or ContractError naming the field that is not what GitHub sends."""
    try:
        return Payload.model_validate(payload)
    except ValidationError as exc:
        raise ContractError("GitHub webhook payload", [(".".join(map(str, e["loc"])) or "(document)", e["msg"])
                                                       for e in exc.errors(include_url=False)]) from None


def decide(event: str, payload: dict[str, Any], settings: GitHubSettings) -> Decision:
    """What to do with a delivery of `event` (pure: the payload and the settings only); ContractError
    when a pull_request or push payload does not have the types GitHub sends (`Payload`)."""
    if event not in ("pull_request", "push"):
        return _ignore("ping" if event == "ping" else f"event {event!r} does not run benchmarks")
    delivery, absent = read_payload(payload), GitHubRepository()
    repo = delivery.repository or absent
    repository, default_branch, clone_url = repo.full_name or "", repo.default_branch or "main", repo.clone_url or ""
    if event == "pull_request":
        action, pull = delivery.action, delivery.pull_request or PullRequest()
        if action not in PR_ACTIONS:
            return _ignore(f"pull_request action {action!r} does not run benchmarks")
        if pull.state not in (None, "open"):
            return _ignore(f"pull request is {pull.state}")
        label = settings.trusted_label
        labels = {str(item.name) for item in pull.labels or []}
        added = delivery.label.name if delivery.label else None
        if action == "labeled" and added != label:
            return _ignore(f"label {added!r} is not {label!r}")
        head, base = pull.head or PullRequestEnd(), pull.base or PullRequestEnd()
        head_repo, base_repo = head.repo or absent, base.repo or absent
        base_name = base_repo.full_name or repository
        if head_repo.full_name != base_name and label not in labels:
            return _ignore(f"pull request from a fork ({head_repo.full_name}) without the label {label!r}: not run "
                           "on devices")
        number = pull.number if pull.number is not None else delivery.number
        if not (number and head.sha and base.sha and base_name):
            return _ignore("pull_request payload without number, head sha, base sha or repository")
        return Decision(
            "pull_request", f"pull request #{number} {action}", repository=base_name, pr=number, head_sha=head.sha,
            head_ref=head.ref or "", head_clone_url=head_repo.clone_url or "", base_sha=base.sha,
            base_ref=base.ref or default_branch, clone_url=base_repo.clone_url or clone_url,
            default_branch=default_branch)
    ref, after = delivery.ref or "", delivery.after or ""
    if ref != f"refs/heads/{default_branch}":
        return _ignore(f"push to {ref}, not to the default branch {default_branch}")
    if delivery.deleted or not after or after == ZERO_SHA:
        return _ignore("push deleted the branch")
    if not repository:
        return _ignore("push payload without repository")
    return Decision("push", f"push to {default_branch}", repository=repository, head_sha=after,
                    head_ref=default_branch, clone_url=clone_url, default_branch=default_branch)


# --- processing ------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False, timeout=600)


def _has_commit(repo: Path, sha: str) -> bool:
    return _git(repo, "cat-file", "-e", f"{sha}^{{commit}}").returncode == 0


def _fetch(repo: Path, sources: list[tuple[str, str]], sha: str) -> None:
    """Fetch refspecs from sources in turn until `sha` is in the checkout."""
    errors = []
    for source, refspec in sources:
        if _has_commit(repo, sha):
            return
        if not source:
            continue
        proc = _git(repo, "fetch", "--no-tags", "--quiet", source, refspec)
        if proc.returncode != 0:
            errors.append(f"git fetch {source} {refspec}: {proc.stderr.strip()[-300:]}")
    if not _has_commit(repo, sha):
        raise WebhookError(f"commit {sha[:10]} not found in the suite checkout after fetching"
                           + (": " + "; ".join(errors) if errors else ""))


def _remote(repo: Path, name: str) -> str:
    return name if name and _git(repo, "remote", "get-url", name).returncode == 0 else ""


def _device_classes(session: Session, settings: Settings) -> list[str]:
    if settings.github.device_classes:
        return list(settings.github.device_classes)
    return farm.online_device_classes(session)


def _choose_base(session: Session, settings: Settings, *, repository: str, head: str, merge_base: str,
                 classes: list[str]) -> str:
    """The newest first-parent ancestor of the merge base with results on every class, else the merge base."""
    found: set[str | None] = {choose_base(session, repository=repository, sha=head, device_class=dc,
                         walk=settings.compare.ancestor_walk, merge_base=merge_base).sha for dc in classes}
    chosen = found.pop() if len(found) == 1 else None
    return chosen or merge_base


def process(session: Session, settings: Settings, decision: Decision) -> tuple[str | None, str]:
    """Fetch, record and queue what `decision` asks for; returns (run id, outcome text). With
    Buildkite configured, a Buildkite build of the commit instead (its steps come from `benchfarm
    pipeline`; no run id: the build's number and URL are in the outcome)."""
    from pipeline.build.suite_loader import SuiteError, commit_history, locate_suite
    from pipeline.orchestration import buildkite_api

    if buildkite_api.configured(settings.buildkite):
        pull_request = {"id": decision.pr, "base_branch": decision.base_ref, "repository": decision.head_clone_url} \
            if decision.kind == "pull_request" else None
        branch = decision.head_ref if decision.kind == "pull_request" else decision.default_branch
        try:
            build = buildkite_api.create_build(
                settings.buildkite, commit=decision.head_sha, branch=branch or decision.default_branch,
                message=f"benchfarm: {decision.kind} {decision.repository}@{decision.head_sha[:10]}",
                env={"BENCHFARM_REPOSITORY": decision.repository},
                meta_data={"benchfarm-kind": decision.kind, "benchfarm-base": decision.base_sha},
                pull_request=pull_request)
        except buildkite_api.BuildkiteError as exc:
            raise WebhookError(str(exc)) from None
        return None, f"Buildkite build {build.number} of {decision.head_sha[:10]}: {build.web_url}"

    if not settings.dispatch.suite_path:
        raise WebhookError("the service has no suite checkout (BENCHFARM_DISPATCH__SUITE_PATH) to build from")
    try:
        location = locate_suite(Path(settings.dispatch.suite_path))
    except SuiteError as exc:
        raise WebhookError(str(exc)) from None
    checkout, remote = location.repo_root, _remote(location.repo_root, settings.github.fetch_remote)
    ingest.upsert_repository(session, name=decision.repository, default_branch=decision.default_branch)
    classes = _device_classes(session, settings)
    if not classes:
        raise WebhookError("no device class to run on: no agent has an online device "
                           "(or set BENCHFARM_GITHUB__DEVICE_CLASSES)")

    def queue(sha: str, kind: str, base: str | None = None) -> triggers.TriggerResult:
        return triggers.queue_run(session, repository=decision.repository, commit_sha=sha, device_classes=classes,
                                  cases=None, max_attempts=settings.dispatch.max_attempts,
                                  extra_targets=settings.dispatch.build_targets, kind=kind, base_sha=base)

    def history(sha: str, *, branch: str | None = None, pr: int | None = None) -> None:
        commits = commit_history(location, sha)
        commits = [c.model_copy(update={"branch": branch}) for c in commits]
        if pr is not None:
            commits[0] = commits[0].model_copy(update={"pull_request": pr})
        ingest.record_commits(session, repository=decision.repository, commits=commits)

    if decision.kind == "push":
        branch = f"refs/heads/{decision.default_branch}"
        _fetch(checkout, [(remote, f"+{branch}:refs/benchfarm/{decision.default_branch}"),
                          (decision.clone_url, f"+{branch}:refs/benchfarm/{decision.default_branch}")],
               decision.head_sha)
        history(decision.head_sha, branch=decision.default_branch)
        result = queue(decision.head_sha, "push")
        reports.owe_report(session, run_id=result.run_id, repository=decision.repository, head_sha=decision.head_sha)
        return result.run_id, f"run {result.run_id} of {decision.head_sha[:10]} (push) on {', '.join(classes)}"

    pr, head = decision.pr, decision.head_sha
    if pr is None:   # a pull request event's decision always names it (`decide`)
        raise WebhookError("a pull request event without its number")
    _fetch(checkout, [(remote, f"+refs/pull/{pr}/head:refs/benchfarm/pull/{pr}"),
                      (decision.clone_url, f"+refs/pull/{pr}/head:refs/benchfarm/pull/{pr}"),
                      (decision.head_clone_url, f"+refs/heads/{decision.head_ref}:refs/benchfarm/pull/{pr}")], head)
    base_ref = f"+refs/heads/{decision.base_ref}:refs/benchfarm/base/{decision.base_ref}"
    _fetch(checkout, [(remote, base_ref), (decision.clone_url, base_ref)], decision.base_sha)
    proc = _git(checkout, "merge-base", decision.base_sha, head)
    if proc.returncode != 0:
        raise WebhookError(f"no merge base of {decision.base_sha[:10]} and {head[:10]}: {proc.stderr.strip()}")
    merge_base = proc.stdout.strip()
    on_default = decision.default_branch if decision.base_ref == decision.default_branch else None
    history(decision.base_sha, branch=on_default)
    history(merge_base, branch=on_default)
    history(head, pr=pr)
    base = _choose_base(session, settings, repository=decision.repository, head=head, merge_base=merge_base,
                        classes=classes)
    older = reports.waiting_reports(session, repository=decision.repository, pull_request=pr)
    same = next((r for r in older if r.head_sha == head), None)
    if same is not None:
        return same.run_id, f"head {head[:10]} of #{pr} is already queued in run {same.run_id}"
    result = queue(head, "pr", base)
    reports.supersede(session, [r.id for r in older], reason=f"a newer head of #{pr} runs in {result.run_id}")
    reports.owe_report(session, run_id=result.run_id, repository=decision.repository, pull_request=pr, head_sha=head,
                       base_sha=base, merge_base=merge_base)
    return result.run_id, (f"run {result.run_id} of #{pr}: {head[:10]} paired with {base[:10]} "
                           f"(merge base {merge_base[:10]}) on {', '.join(classes)}")


class WebhookWorker(Loop):
    """Processes pending deliveries, oldest first, one at a time."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        super().__init__("webhook-worker", 0.5)
        self.settings, self.engine = settings, engine

    def step(self) -> bool:
        with session_scope(self.engine) as session:
            delivery = deliveries.next_pending(session)
        if delivery is None:
            return False
        delivery_id, event, payload = delivery.id, delivery.event, delivery.payload
        state, run_id = "ignored", None
        try:
            decision = decide(event, payload, self.settings.github)   # stored by an older service: unchecked
            if decision.kind == "ignore":
                outcome = decision.reason
            else:
                with session_scope(self.engine) as session:
                    run_id, outcome = process(session, self.settings, decision)
                state = "done"
        except (WebhookError, ContractError, triggers.TriggerError, ingest.IngestError) as exc:
            state, outcome = "failed", str(exc)
        except Exception as exc:
            log.exception("webhook delivery %s failed", delivery_id)
            state, outcome = "failed", f"{type(exc).__name__}: {exc}"
        log.info("webhook delivery %s (%s): %s", delivery_id, event, outcome)
        with session_scope(self.engine) as session:
            deliveries.settle_delivery(session, delivery_id, state=state, outcome=outcome, run_id=run_id)
        return True
