"""The one HTTP retry policy of benchfarm's clients (the agents' ServiceClient, Buildkite, alert
webhooks through `session`; PyGithub's retry in `pr_comments.github` reads the same rule).

A request whose answer is lost (a read error, or 502/503/504 from a proxy or a service whose store
is away) may or may not have been carried out. It is sent again only when that is harmless: an
idempotent method, or a POST that carries an `Idempotency-Key` (the caller declares that the server
treats a repeat as the same request). A connection that could not be opened sent nothing, so every
request is retried then. Back-off: `backoff_s`, doubled per retry up to `backoff_max_s`; a
Retry-After is waited instead (at most `backoff_max_s`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

__all__ = ["IDEMPOTENCY_KEY", "IDEMPOTENT_METHODS", "RETRY_STATUSES", "RetryPolicy", "idempotency_key",
           "resendable", "retry_policy", "session"]

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
"""RFC 9110's idempotent methods: sending one twice has the effect of sending it once."""
RETRY_STATUSES = frozenset({502, 503, 504})
"""Answers that say the request may be tried again later (gateway failed, unavailable, timed out)."""
IDEMPOTENCY_KEY = "Idempotency-Key"
"""The header that makes a POST resendable (draft-ietf-httpapi-idempotency-key-header)."""


def resendable(method: str, headers: Mapping[str, object] | None = None) -> bool:
    """May this request be sent again after its answer was lost? An idempotent method, or a POST
    with an Idempotency-Key header (matched without regard to case)."""
    method = method.upper()
    if method in IDEMPOTENT_METHODS:
        return True
    return method == "POST" and any(k.lower() == IDEMPOTENCY_KEY.lower() for k in headers or {})


def idempotency_key() -> dict[str, str]:
    """A fresh Idempotency-Key header for one request (the same on each of its retries)."""
    return {IDEMPOTENCY_KEY: uuid.uuid4().hex}


class RetryPolicy(Retry):
    """urllib3's Retry under the rule above; `sleep` is injectable (tests wait for nothing). As made
    by `retry_policy` it allows the idempotent methods; `keyed()` adds POST, for keyed requests."""

    RETRY_AFTER_STATUS_CODES = RETRY_STATUSES   # no other status is retried for carrying a Retry-After

    def __init__(self, *, sleep: Callable[[float], None] = time.sleep, **kwargs: Any) -> None:
        self._sleep = sleep
        super().__init__(**kwargs)

    def new(self, **kw: Any) -> RetryPolicy:
        kw.setdefault("sleep", self._sleep)
        return super().new(**kw)

    def keyed(self) -> RetryPolicy:
        """The same policy for a POST carrying an Idempotency-Key."""
        return self.new(allowed_methods=frozenset(self.allowed_methods or ()) | {"POST"})

    def get_backoff_time(self) -> float:
        """backoff_s before the first retry, doubled for each one after, at most backoff_max_s."""
        if not self.history:
            return 0.0
        return float(min(self.backoff_max, self.backoff_factor * 2 ** (len(self.history) - 1)))

    def sleep(self, response: Any = None) -> None:
        """The server's Retry-After when it gave one (at most backoff_max_s), else the back-off."""
        wait = self.get_retry_after(response) if response is not None and self.respect_retry_after_header else None
        wait = self.get_backoff_time() if wait is None else min(wait, self.backoff_max)
        if wait > 0:
            self._sleep(wait)


def retry_policy(retries: int, *, backoff_s: float = 0.5, backoff_max_s: float = 10.0,
                 sleep: Callable[[float], None] = time.sleep) -> RetryPolicy:
    """`retries` retries of a request (so `retries + 1` attempts at most) under the rule above; the
    last answer is returned as it is (raise_on_status off) for the caller to judge."""
    return RetryPolicy(total=retries, connect=retries, read=retries, status=retries, other=retries, redirect=False,
                       allowed_methods=IDEMPOTENT_METHODS, status_forcelist=RETRY_STATUSES,
                       backoff_factor=backoff_s, backoff_max=backoff_max_s,
                       raise_on_status=False, respect_retry_after_header=True, sleep=sleep)


class _PolicyAdapter(HTTPAdapter):
    """Sends each request under the policy its method and headers allow: a keyed POST through an
    adapter whose policy allows POST, every other request through this one's."""

    def __init__(self, policy: RetryPolicy) -> None:
        super().__init__(max_retries=policy)
        self._keyed = HTTPAdapter(max_retries=policy.keyed())

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        if request.method and request.method.upper() == "POST" and resendable("POST", request.headers):
            return self._keyed.send(request, *args, **kwargs)
        return super().send(request, *args, **kwargs)

    def close(self) -> None:
        self._keyed.close()
        super().close()


def session(policy: RetryPolicy) -> requests.Session:
    """A requests session whose every request (http and https) is retried under `policy`."""
    made = requests.Session()
    adapter = _PolicyAdapter(policy)
    made.mount("http://", adapter)
    made.mount("https://", adapter)
    return made
