"""GitHub's side of webhooks for tests: a hosted repository (a local bare repository with
`refs/pull/N/head`, as GitHub keeps one per pull request), payloads of the shapes GitHub sends
(`pull_request`, `push`), and signed deliveries over HTTP."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from pipeline.service.github_webhook import sign
from tests.helpers.suite_repo import commit_all, git, write_files

SECRET = "webhook-secret-for-tests"


@dataclass
class HostedRepo:
    """`full_name` hosted at `bare` (the clone URL); `work` is a developer's clone that pushes."""

    full_name: str
    bare: Path
    work: Path

    @classmethod
    def create(cls, root: Path, full_name: str, files: dict[str, str]) -> HostedRepo:
        bare = root / f"{full_name.replace('/', '-')}.git"
        root.mkdir(parents=True, exist_ok=True)
        git(root, "init", "-q", "--bare", "-b", "main", str(bare))
        work = root / f"{full_name.replace('/', '-')}-work"
        git(root, "clone", "-q", str(bare), str(work))
        git(work, "checkout", "-q", "-b", "main")
        write_files(work, files)
        commit_all(work, "initial suite")
        git(work, "push", "-q", "origin", "main")
        return cls(full_name, bare, work)

    def clone(self, dest: Path) -> Path:
        """A checkout of the hosted repository (the service's suite checkout)."""
        git(dest.parent, "clone", "-q", str(self.bare), str(dest))
        return dest

    def commit(self, branch: str, files: dict[str, str], message: str) -> str:
        """Commit `files` on `branch` (created from the current commit when new) and push it."""
        if git(self.work, "branch", "--list", branch):
            git(self.work, "checkout", "-q", branch)
        else:
            git(self.work, "checkout", "-q", "-b", branch)
        write_files(self.work, files)
        sha = commit_all(self.work, message)
        git(self.work, "push", "-q", "origin", f"{branch}:refs/heads/{branch}")
        return sha

    def open_pull(self, number: int, branch: str) -> None:
        """What GitHub does for a pull request: keep its head as refs/pull/N/head."""
        git(self.work, "push", "-q", "-f", "origin", f"{branch}:refs/pull/{number}/head")

    def sha(self, ref: str) -> str:
        return git(self.work, "rev-parse", ref)


def _repo_json(full_name: str, clone_url: str, default_branch: str = "main") -> dict[str, Any]:
    owner, name = full_name.split("/")
    return {"full_name": full_name, "name": name, "owner": {"login": owner}, "clone_url": clone_url,
            "default_branch": default_branch}


def pull_request_payload(repo: HostedRepo, number: int, *, action: str, head_sha: str, head_ref: str, base_sha: str,
                         labels: tuple[str, ...] = (), label: str | None = None, fork: HostedRepo | None = None,
                         ) -> dict[str, Any]:
    base_repo = _repo_json(repo.full_name, str(repo.bare))
    head_repo = _repo_json(fork.full_name, str(fork.bare)) if fork else base_repo
    payload: dict[str, Any] = {
        "action": action, "number": number, "repository": base_repo,
        "pull_request": {
            "number": number, "state": "open", "labels": [{"name": n} for n in labels],
            "head": {"sha": head_sha, "ref": head_ref, "repo": head_repo},
            "base": {"sha": base_sha, "ref": "main", "repo": base_repo},
        },
    }
    if label is not None:
        payload["label"] = {"name": label}
    return payload


def push_payload(repo: HostedRepo, *, before: str, after: str, ref: str = "refs/heads/main") -> dict[str, Any]:
    return {"ref": ref, "before": before, "after": after, "deleted": False,
            "repository": _repo_json(repo.full_name, str(repo.bare))}


def deliver(url: str, event: str, payload: dict[str, Any], *, secret: str | None = SECRET,
            delivery: str | None = None, signature: str | None = None) -> requests.Response:
    """POST a delivery as GitHub does: JSON body, X-GitHub-Event, X-GitHub-Delivery and (with a
    secret) X-Hub-Signature-256; `signature` overrides the computed one."""
    body = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", "X-GitHub-Event": event,
               "X-GitHub-Delivery": delivery or str(uuid.uuid4()), "User-Agent": "GitHub-Hookshot/test"}
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    elif secret is not None:
        headers["X-Hub-Signature-256"] = sign(secret, body)
    return requests.post(f"{url.rstrip('/')}/api/v1/webhooks/github", data=body, headers=headers, timeout=30)
