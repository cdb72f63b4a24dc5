"""Posting a report on GitHub with PyGithub: one sticky comment per pull request, and the verdict
as a check run (GitHub App) or a commit status (plain token).

Transport failures are retried under the project's one rule (`pipeline.http`): reads are retried
on 502/503/504 and lost answers, writes are not (PyGithub sends no Idempotency-Key); every request
is retried on a rate limit (403/429 with Retry-After or rate-limit headers: it was not carried
out; PyGithub's `GithubRetry` reads those). A write answered with 5xx may or may not have been
carried out, so the poster decides (`_after_5xx`): an edit sets the same fields again, a new
comment is retried only after looking for what it would have created (never a second sticky one).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self, TypeVar, cast

from github import Auth, Github, GithubException, GithubIntegration, GithubRetry
from github.GithubObject import NotSet
from github.IssueComment import IssueComment
from github.PullRequest import PullRequest
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from pipeline import http
from pipeline.config import GitHubSettings
from pipeline.pr_comments.report import Report

__all__ = ["GitHubError", "GitHubPoster", "Posted"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class GitHubError(RuntimeError):
    """Posting failed; the message says what GitHub answered and which setting to look at."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Posted:
    comment_id: int | None       # None for a push (no pull request)
    comment_created: bool
    check_run_id: int | None
    status_state: str | None


class _Retry(GithubRetry):
    """GithubRetry under `pipeline.http`'s rule: 502/503/504 and lost answers are retried only for a
    request `http.resendable` allows (the poster decides for writes), rate limits for every request;
    a Retry-After longer than `max_wait_s` gives up instead of waiting."""

    RETRY_AFTER_STATUS_CODES = http.RETRY_STATUSES | {429}

    def __init__(self, *, max_wait_s: float, **kwargs: Any) -> None:
        self.max_wait_s = max_wait_s
        super().__init__(**kwargs)

    def new(self, **kw: Any) -> _Retry:
        kw["max_wait_s"] = self.max_wait_s
        return super().new(**kw)

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        if status_code in http.RETRY_STATUSES and not http.resendable(method):
            return False
        return bool(super().is_retry(method, status_code, has_retry_after))

    def increment(self, method: str | None = None, url: str | None = None, response: Any = None,
                  error: Exception | None = None, _pool: Any = None, _stacktrace: Any = None) -> Self:
        if isinstance(error, ReadTimeoutError | ProtocolError) and not http.resendable(method or ""):
            raise error   # sent, answer lost: the write may have been carried out
        return cast(Self, super().increment(method, url, response, error, _pool, _stacktrace))   # GithubRetry says Retry

    def get_retry_after(self, response: Any) -> float | None:
        wait = super().get_retry_after(response)
        if wait is not None and wait > self.max_wait_s:
            raise GithubException(response.status, {"message": f"Retry-After {wait:g}s is over the "
                                  f"{self.max_wait_s:g}s allowed (BENCHFARM_GITHUB__MAX_WAIT_S)"},
                                  dict(response.headers))
        return wait


def _retry(settings: GitHubSettings) -> _Retry:
    return _Retry(
        max_wait_s=settings.max_wait_s,
        total=settings.retries, connect=settings.retries, read=settings.retries,
        backoff_factor=settings.backoff_s, backoff_max=max(settings.max_wait_s, settings.backoff_s),
        status_forcelist=[429, *sorted(http.RETRY_STATUSES)],   # GithubRetry adds 403 (its rate limits)
        allowed_methods=http.IDEMPOTENT_METHODS | {"POST", "PATCH"},   # writes too, for rate limits (is_retry)
        raise_on_status=False,      # the last answer goes to PyGithub, which raises GithubException
        secondary_rate_wait=min(60.0, settings.max_wait_s), max_rate_limit_wait=settings.max_wait_s,
    )


def _describe(exc: GithubException, what: str, settings: GitHubSettings) -> GitHubError:
    message = exc.data.get("message") if isinstance(exc.data, dict) else exc.data
    hint = {
        401: " — check BENCHFARM_GITHUB__TOKEN (or the App id and private key)",
        403: " — the token or App lacks permission (issues/pull requests: write; checks or statuses: write), or a rate limit",
        404: " — the repository or pull request does not exist, or the credentials cannot see it",
    }.get(exc.status, "")
    return GitHubError(f"{what}: GitHub at {settings.api_url} answered {exc.status} {message!s}{hint}", status=exc.status)


class GitHubPoster:
    """Posts `Report`s with one set of credentials. Construction does no request."""

    def __init__(self, settings: GitHubSettings, *, sleep: Callable[[float], None] = time.sleep) -> None:
        if not settings.uses_app and not settings.token.get_secret_value():
            raise GitHubError("no GitHub credentials: set BENCHFARM_GITHUB__TOKEN, or BENCHFARM_GITHUB__APP_ID "
                              "and BENCHFARM_GITHUB__APP_PRIVATE_KEY")
        self.settings = settings
        self._sleep = sleep
        self._clients: dict[str, tuple[Github, str | None]] = {}

    # -- clients and identity ----------------------------------------------------------

    def _common(self) -> dict[str, Any]:
        s = self.settings
        return {"base_url": s.api_url.rstrip("/"), "timeout": s.timeout_s, "retry": _retry(s), "per_page": 100,
                "seconds_between_requests": None, "seconds_between_writes": s.seconds_between_writes or None,
                "user_agent": "benchfarm"}

    def _client(self, repository: str) -> tuple[Github, str | None]:
        """A client for `repository` and the login our comments carry (None: unknown, any author)."""
        key = repository if self.settings.uses_app else ""
        if key in self._clients:
            return self._clients[key]
        s = self.settings
        login: str | None
        if s.uses_app:
            app_auth = Auth.AppAuth(s.app_id, s.private_key_pem())
            integration = GithubIntegration(auth=app_auth, **{k: v for k, v in self._common().items()
                                                               if k != "seconds_between_writes"})
            try:
                installation_id = s.installation_id or integration.get_repo_installation(*repository.split("/", 1)).id
                login = s.bot_login or f"{integration.get_app().slug}[bot]"
            except GithubException as exc:
                raise _describe(exc, f"App {s.app_id} on {repository}", s) from None
            client = Github(auth=app_auth.get_installation_auth(installation_id), **self._common())
        else:
            client = Github(auth=Auth.Token(s.token.get_secret_value()), **self._common())
            login = s.bot_login or self._token_login(client)
        self._clients[key] = (client, login)
        return client, login

    def _token_login(self, client: Github) -> str | None:
        try:
            return client.get_user().login
        except GithubException as exc:
            if exc.status == 401:
                raise _describe(exc, "who am I (GET /user)", self.settings) from None
            # An Actions or installation token cannot read /user: take any author's marked comment.
            log.info("GitHub identity unknown (%s); the sticky comment is found by its marker alone", exc.status)
            return None

    @property
    def reports_as(self) -> str:
        if self.settings.report_as != "auto":
            return self.settings.report_as
        return "check_run" if self.settings.uses_app else "status"

    # -- posting ----------------------------------------------------------------------

    def post(self, report: Report) -> Posted:
        """The sticky comment (when the report is for a pull request), then the check or status."""
        client, login = self._client(report.repository)
        try:
            repo = client.get_repo(report.repository)
            check_run = None
            if self.reports_as == "check_run":
                check_run = self._after_5xx(lambda: repo.create_check_run(
                    name=self.settings.check_name, head_sha=report.head_sha, status="in_progress"))
            comment_id, created = (None, False)
            if report.pr is not None:
                comment_id, created = self._upsert_comment(repo.get_pull(report.pr), report, login)
            state = None
            if check_run is not None:
                output = {"title": report.title[:255], "summary": report.check_summary()}
                details = report.details_url if report.details_url.startswith("https://") else NotSet
                self._after_5xx(lambda: check_run.edit(status="completed", conclusion=report.conclusion,
                                                       output=output, details_url=details))
            else:
                state = "failure" if report.conclusion == "failure" else "success"
                status = {"state": state, "description": report.title[:140], "context": self.settings.check_name,
                          **({"target_url": report.details_url} if report.details_url else {})}
                # POST /repos/{o}/{r}/statuses/{sha} through the requester PyGithub offers for such calls:
                # Commit.create_status would first GET the commit, a request we do not need.
                self._after_5xx(lambda: repo.requester.requestJsonAndCheck(
                    "POST", f"{repo.url}/statuses/{report.head_sha}", input=status))
        except GithubException as exc:
            raise _describe(exc, f"report on {report.repository}@{report.head_sha[:10]}", self.settings) from None
        return Posted(comment_id, created, check_run.id if check_run is not None else None, state)

    def find_comment(self, pull: PullRequest, report: Report, login: str | None) -> IssueComment | None:
        """Our marked comment on the pull request (the newest one), through every page of comments."""
        found = None
        for comment in pull.get_issue_comments():
            if login is not None and comment.user.login != login:
                continue
            if report.marker in (comment.body or ""):
                found = comment
        return found

    def _upsert_comment(self, pull: PullRequest, report: Report, login: str | None) -> tuple[int, bool]:
        existing = self.find_comment(pull, report, login)
        if existing is not None:
            self._after_5xx(lambda: existing.edit(report.body))
            return existing.id, False

        def recover() -> IssueComment | None:  # the POST may have been carried out after all
            return self.find_comment(pull, report, login)

        comment = self._after_5xx(lambda: pull.create_issue_comment(report.body), recover=recover)
        if comment.body != report.body:  # found by recover() with an older body
            self._after_5xx(lambda: comment.edit(report.body))
        return comment.id, True

    def _after_5xx(self, attempt: Callable[[], T], recover: Callable[[], T | None] | None = None) -> T:
        """Run a write (which `_Retry` does not repeat); on 5xx, back off, look for its effect with
        `recover`, and try again. A repeat is harmless for edits (the same fields set again) and
        statuses (the newest of a context counts); a new comment has `recover`; a check run created
        twice after a lost answer stays twice on GitHub (no recovery for it yet)."""
        for n in range(self.settings.retries + 1):
            try:
                return attempt()
            except GithubException as exc:
                if exc.status < 500 or n == self.settings.retries:
                    raise
                log.info("GitHub answered %s to a POST; retry %d of %d", exc.status, n + 1, self.settings.retries)
                self._sleep(min(self.settings.backoff_s * 2**n, self.settings.max_wait_s))
                if recover is not None and (done := recover()) is not None:
                    return done
        raise AssertionError("unreachable")
