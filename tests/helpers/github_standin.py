"""A stand-in for api.github.com: the REST endpoints PyGithub calls to post a benchfarm report.

A real HTTP server (FastAPI under uvicorn on a loopback port, see `live_server`); PyGithub is
pointed at it with `base_url`. It implements only what the reporter uses, with GitHub's shapes,
status codes and headers:

- GET  /user                                   identity of a token (403 for an App installation token)
- GET  /app                                    identity of an App (JWT)
- GET  /repos/{o}/{r}/installation             the App's installation on a repository (JWT)
- POST /app/installations/{id}/access_tokens   an installation token (JWT)
- GET  /repos/{o}/{r}
- GET  /repos/{o}/{r}/pulls/{n}
- GET  /repos/{o}/{r}/issues/{n}/comments      paginated (per_page, page) with a Link header
- POST /repos/{o}/{r}/issues/{n}/comments
- PATCH /repos/{o}/{r}/issues/comments/{id}
- POST /repos/{o}/{r}/check-runs               installation tokens only, as on GitHub
- PATCH /repos/{o}/{r}/check-runs/{id}
- POST /repos/{o}/{r}/statuses/{sha}

Every request is recorded (`requests`); `inject(status, times=…)` makes the next matching
requests fail (5xx, 403/429 rate limits with their headers), before they reach the endpoint or,
with `after=True`, after it carried them out; a wrong or missing token gets 401 "Bad credentials".
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from tests.helpers.live_server import live_server

__all__ = ["GitHubStandIn", "Injection", "RecordedRequest", "github_standin"]


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    auth: str            # "token X", "Bearer JWT" or ""
    body: Any
    status: int = 0
    at: float = 0.0


@dataclass
class Injection:
    status: int
    times: int
    method: str | None = None
    path: str | None = None          # a regular expression searched in the path
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "Server Error"
    after: bool = False              # carry the request out, then answer with the error (a lost reply)


@dataclass
class _Repo:
    id: int
    owner: str
    name: str
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)   # issue number -> comments
    check_runs: dict[int, dict[str, Any]] = field(default_factory=dict)
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # sha -> statuses, oldest first


class GitHubStandIn:
    """State and behaviour of the stand-in; `app` is the ASGI app, `base_url` is set while served."""

    def __init__(self) -> None:
        self.base_url = ""
        self.requests: list[RecordedRequest] = []
        self.injections: list[Injection] = []
        self.tokens: dict[str, str] = {}                  # token -> user login
        self.app_id: str | None = None
        self.app_slug = "benchfarm"
        self.app_public_key: str | None = None
        self.installation_id = 4242
        self.installation_tokens: dict[str, datetime] = {}
        self._repos: dict[str, _Repo] = {}
        self._ids = itertools.count(1000)
        self._lock = threading.Lock()
        self.app = self._make_app()

    # -- set-up by tests ------------------------------------------------------------------

    def add_token(self, token: str, login: str) -> None:
        self.tokens[token] = login

    def enable_app(self, app_id: str, public_key_pem: str, slug: str = "benchfarm") -> None:
        self.app_id, self.app_public_key, self.app_slug = app_id, public_key_pem, slug

    def add_pull(self, full_name: str, number: int, head_sha: str, base_sha: str = "0" * 40) -> None:
        repo = self._repo(full_name, create=True)
        assert repo is not None
        repo.pulls[number] = {"head": head_sha, "base": base_sha}
        repo.comments.setdefault(number, [])

    def add_comment(self, full_name: str, number: int, body: str, login: str, user_type: str = "User") -> dict[str, Any]:
        repo = self._repo(full_name)
        assert repo is not None
        comment = self._comment_json(repo, number, next(self._ids), body, login, user_type)
        repo.comments[number].append(comment)
        return comment

    def inject(self, status: int, times: int = 1, *, method: str | None = None, path: str | None = None,
               headers: dict[str, str] | None = None, message: str = "Server Error", after: bool = False) -> None:
        """The next `times` requests matching `method` and `path` (a regex) get `status`; with
        `after`, each is carried out first (the reply is lost on the way back, as with a 502)."""
        self.injections.append(Injection(status, times, method, path, dict(headers or {}), message, after))

    # -- what tests read ------------------------------------------------------------------

    def comments(self, full_name: str, number: int) -> list[dict[str, Any]]:
        repo = self._repo(full_name)
        return list(repo.comments.get(number, [])) if repo else []

    def check_runs(self, full_name: str) -> list[dict[str, Any]]:
        repo = self._repo(full_name)
        return list(repo.check_runs.values()) if repo else []

    def statuses(self, full_name: str, sha: str) -> list[dict[str, Any]]:
        repo = self._repo(full_name)
        return list(repo.statuses.get(sha, [])) if repo else []

    def calls(self, method: str, pattern: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == method and re.search(pattern, r.path)]

    # -- internals ------------------------------------------------------------------------

    def _repo(self, full_name: str, create: bool = False) -> _Repo | None:
        if full_name not in self._repos and create:
            owner, name = full_name.split("/")
            self._repos[full_name] = _Repo(next(self._ids), owner, name)
        return self._repos.get(full_name)

    def _comment_json(self, repo: _Repo, number: int, cid: int, body: str, login: str, user_type: str) -> dict[str, Any]:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "id": cid, "body": body, "user": {"login": login, "id": abs(hash(login)) % 10**6, "type": user_type},
            "url": f"{self.base_url}/repos/{repo.owner}/{repo.name}/issues/comments/{cid}",
            "html_url": f"https://github.example/{repo.owner}/{repo.name}/pull/{number}#issuecomment-{cid}",
            "issue_url": f"{self.base_url}/repos/{repo.owner}/{repo.name}/issues/{number}",
            "created_at": now, "updated_at": now,
        }

    def _identity(self, auth: str) -> tuple[str, str] | None:
        """("user", login) for a personal token, ("installation", bot login) for an installation
        token, ("app", app id) for a valid App JWT; None when not valid."""
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "token" and value in self.tokens:
            return "user", self.tokens[value]
        if scheme.lower() == "token" and value in self.installation_tokens:
            if self.installation_tokens[value] > datetime.now(UTC):
                return "installation", f"{self.app_slug}[bot]"
        if scheme.lower() == "bearer" and self.app_public_key and self.app_id:
            try:
                claims = jwt.decode(value, self.app_public_key, algorithms=["RS256"])
            except jwt.PyJWTError:
                return None
            if str(claims.get("iss")) == self.app_id:
                return "app", self.app_id
        return None

    def _injected(self, method: str, path: str) -> Injection | None:
        with self._lock:
            for injection in self.injections:
                if injection.times > 0 and (injection.method in (None, method)) and (
                        injection.path is None or re.search(injection.path, path)):
                    injection.times -= 1
                    return injection
        return None

    def _make_app(self) -> FastAPI:  # noqa: C901 - one closure per endpoint, as on GitHub
        app = FastAPI()
        standin = self

        def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
            return JSONResponse({"message": message, "documentation_url": "https://docs.github.com/rest"},
                                status_code=status, headers=headers)

        @app.middleware("http")
        async def record_and_guard(request: Request, call_next):  # type: ignore[no-untyped-def]
            raw = await request.body()
            try:
                import json
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
            recorded = RecordedRequest(request.method, request.url.path, dict(request.query_params),
                                       request.headers.get("authorization", ""), body, at=time.monotonic())
            standin.requests.append(recorded)
            injection = standin._injected(request.method, request.url.path)
            if injection is not None and not injection.after:
                response: Response = error(injection.status, injection.message, injection.headers)
            else:
                identity = standin._identity(recorded.auth)
                if identity is None:
                    response = error(401, "Bad credentials")
                else:
                    request.state.identity = identity
                    response = await call_next(request)
                    if injection is not None:
                        response = error(injection.status, injection.message, injection.headers)
            recorded.status = response.status_code
            return response

        def needs(request: Request, *kinds: str) -> JSONResponse | None:
            if request.state.identity[0] not in kinds:
                if request.state.identity[0] == "app":
                    return error(401, "A JSON web token could not be decoded")  # JWT on a token route
                return error(403, "Resource not accessible by integration")
            return None

        def repo_or_404(owner: str, name: str) -> _Repo | JSONResponse:
            repo = standin._repo(f"{owner}/{name}")
            return repo if repo is not None else error(404, "Not Found")

        def repo_json(repo: _Repo) -> dict[str, Any]:
            return {"id": repo.id, "name": repo.name, "full_name": f"{repo.owner}/{repo.name}",
                    "owner": {"login": repo.owner, "type": "Organization"},
                    "url": f"{standin.base_url}/repos/{repo.owner}/{repo.name}",
                    "html_url": f"https://github.example/{repo.owner}/{repo.name}", "private": False}

        @app.get("/user")
        def user(request: Request) -> Any:
            if (refused := needs(request, "user")) is not None:
                return refused
            login = request.state.identity[1]
            return {"login": login, "id": abs(hash(login)) % 10**6, "type": "User"}

        @app.get("/app")
        def get_app(request: Request) -> Any:
            if (refused := needs(request, "app")) is not None:
                return refused
            return {"id": int(standin.app_id or 0), "slug": standin.app_slug, "name": standin.app_slug,
                    "owner": {"login": "acme"}}

        @app.get("/repos/{owner}/{name}/installation")
        def installation(owner: str, name: str, request: Request) -> Any:
            if request.state.identity[0] != "app":
                return error(401, "A JSON web token could not be decoded")
            repo = repo_or_404(owner, name)
            if isinstance(repo, JSONResponse):
                return repo
            return {"id": standin.installation_id, "app_id": int(standin.app_id or 0),
                    "account": {"login": owner}, "target_type": "Organization"}

        @app.post("/app/installations/{installation_id}/access_tokens", status_code=201)
        def access_token(installation_id: int, request: Request) -> Any:
            if request.state.identity[0] != "app":
                return error(401, "A JSON web token could not be decoded")
            if installation_id != standin.installation_id:
                return error(404, "Not Found")
            token = f"ghs_{next(standin._ids)}"
            expires = datetime.now(UTC) + timedelta(hours=1)
            standin.installation_tokens[token] = expires
            return JSONResponse({"token": token, "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                 "permissions": {"checks": "write", "pull_requests": "write"}}, status_code=201)

        @app.get("/repos/{owner}/{name}")
        def get_repo(owner: str, name: str, request: Request) -> Any:
            if (refused := needs(request, "user", "installation")) is not None:
                return refused
            repo = repo_or_404(owner, name)
            return repo if isinstance(repo, JSONResponse) else repo_json(repo)

        @app.get("/repos/{owner}/{name}/pulls/{number}")
        def get_pull(owner: str, name: str, number: int, request: Request) -> Any:
            if (refused := needs(request, "user", "installation")) is not None:
                return refused
            repo = repo_or_404(owner, name)
            if isinstance(repo, JSONResponse):
                return repo
            if number not in repo.pulls:
                return error(404, "Not Found")
            base = f"{standin.base_url}/repos/{owner}/{name}"
            pull = repo.pulls[number]
            return {"id": number + 10**6, "number": number, "state": "open", "title": f"PR {number}",
                    "url": f"{base}/pulls/{number}", "issue_url": f"{base}/issues/{number}",
                    "html_url": f"https://github.example/{owner}/{name}/pull/{number}",
                    "head": {"sha": pull["head"], "ref": f"pr-{number}"},
                    "base": {"sha": pull["base"], "ref": "main", "repo": repo_json(repo)}}

        @app.get("/repos/{owner}/{name}/issues/{number}/comments")
        def list_comments(owner: str, name: str, number: int, request: Request,
                          per_page: int = 30, page: int = 1) -> Any:
            if (refused := needs(request, "user", "installation")) is not None:
                return refused
            repo = repo_or_404(owner, name)
            if isinstance(repo, JSONResponse):
                return repo
            if number not in repo.comments:
                return error(404, "Not Found")
            per_page = max(1, min(per_page, 100))
            everything = repo.comments[number]
            last = max(1, -(-len(everything) // per_page))
            chunk = everything[(page - 1) * per_page: page * per_page]
            url = f"{standin.base_url}/repos/{owner}/{name}/issues/{number}/comments?per_page={per_page}&page="
            links = []
            if page < last:
                links += [f'<{url}{page + 1}>; rel="next"', f'<{url}{last}>; rel="last"']
            if page > 1:
                links += [f'<{url}{page - 1}>; rel="prev"', f'<{url}1>; rel="first"']
            return JSONResponse(chunk, headers={"Link": ", ".join(links)} if links else None)

        @app.post("/repos/{owner}/{name}/issues/{number}/comments", status_code=201)
        async def create_comment(owner: str, name: str, number: int, request: Request) -> Any:
            if (refused := needs(request, "user", "installation")) is not None:
                return refused
            repo = repo_or_404(owner, name)
            if isinstance(repo, JSONResponse):
                return repo
            body = (await request.json()).get("body")
            if number not in repo.comments:
                return error(404, "Not Found")
            if not isinstance(body, str) or not body:
                return error(422, "Validation Failed")
            if len(body) > 65536:
                return error(422, "Validation Failed: body is too long (maximum is 65536 characters)")
            kind, login = request.state.identity
            comment = standin._comment_json(repo, number, next(standin._ids), body, login,
                                            "Bot" if kind == "installation" else "User")
            repo.comments[number].append(comment)
            return JSONResponse(comment, status_code=201)

        @app.patch("/repos/{owner}/{name}/issues/comments/{comment_id}")
        async def edit_comment(owner: str, name: str, comment_id: int, request: Request) -> Any:
            if (refused := needs(request, "user", "installation")) is not None:
                return refused
            repo = repo_or_404(owner, name)
            if isinstance(repo, JSONResponse):
                return repo
            body = (await request.json()).get("body")
            if not isinstance(body, str) or not body or len(body) > 65536:
                return error(422, "Validation Failed")
            for comment in itertools.chain.from_iterable(repo.comments.values()):
                if comment["id"] == comment_id:
                    if comment["user"]["login"] != request.state.identity[1]:
                        return error(403, "Must have admin rights to Repository.")
                    comment["body"] = body
                    comment["updated_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                    return comment
            return error(404, "Not Found")

        def check_json(repo: _Repo, run: dict[str, Any]) -> dict[str, Any]:
            return {**run, "url": f"{standin.base_url}/repos/{repo.owner}/{repo.name}/check-runs/{run['id']}",
                    "html_url": f"https://github.example/{repo.owner}/{repo.name}/runs/{run['id']}"}

        @app.post("/repos/{owner}/{name}/check-runs", status_code=201)
        async def create_check_run(owner: str, name: str, request: Request) -> Any:
            if request.state.identity[0] != "installation":   # the Checks API is for GitHub Apps only
                return error(403, "You must authenticate via a GitHub App.")
            repo = repo_or_404(owner, name)
            if isinstance(repo, JSONResponse):
                return repo
            given = await request.json()
            if not given.get("name") or not re.fullmatch(r"[0-9a-f]{40}", given.get("head_sha", "")):
                return error(422, "Validation Failed")
            if given.get("conclusion") and given.get("status", "completed") != "completed":
                return error(422, "Validation Failed: conclusion needs status completed")
            run = {"id": next(standin._ids), "status": "queued", "conclusion": None, "output": None, **given}
            repo.check_runs[run["id"]] = run
            return JSONResponse(check_json(repo, run), status_code=201)

        @app.patch("/repos/{owner}/{name}/check-runs/{run_id}")
        async def update_check_run(owner: str, name: str, run_id: int, request: Request) -> Any:
            if request.state.identity[0] != "installation":
                return error(403, "You must authenticate via a GitHub App.")
            repo = repo_or_404(owner, name)
            if isinstance(repo, JSONResponse):
                return repo
            if run_id not in repo.check_runs:
                return error(404, "Not Found")
            given = await request.json()
            if given.get("conclusion") not in (None, "success", "failure", "neutral", "cancelled", "skipped",
                                               "timed_out", "action_required"):
                return error(422, "Validation Failed: conclusion")
            output = given.get("output") or {}
            if len(output.get("summary", "")) > 65535 or len(output.get("text", "")) > 65535:
                return error(422, "Validation Failed: output is too long")
            repo.check_runs[run_id].update(given)
            return check_json(repo, repo.check_runs[run_id])

        @app.post("/repos/{owner}/{name}/statuses/{sha}", status_code=201)
        async def create_status(owner: str, name: str, sha: str, request: Request) -> Any:
            if (refused := needs(request, "user", "installation")) is not None:
                return refused
            repo = repo_or_404(owner, name)
            if isinstance(repo, JSONResponse):
                return repo
            given = await request.json()
            if given.get("state") not in ("error", "failure", "pending", "success"):
                return error(422, "Validation Failed: state")
            if len(given.get("description") or "") > 140:
                return error(422, "Validation Failed: description is too long (maximum is 140 characters)")
            status = {"id": next(standin._ids), "context": "default", **given,
                      "url": f"{standin.base_url}/repos/{owner}/{name}/statuses/{sha}",
                      "creator": {"login": request.state.identity[1]}}
            repo.statuses.setdefault(sha, []).append(status)
            return JSONResponse(status, status_code=201)

        return app


@contextmanager
def github_standin() -> Iterator[GitHubStandIn]:
    """A served stand-in; its `base_url` is where PyGithub should point."""
    standin = GitHubStandIn()
    with live_server(standin.app) as url:
        standin.base_url = url
        yield standin
