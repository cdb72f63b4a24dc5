"""The one HTTP client of the agents: base URL, bearer token, timeouts, and the project's retry
policy (`pipeline.http`: idempotent requests and keyed POSTs retried on connection errors and
502/503/504 with exponential back-off). Everything the agent says to the service goes through
`ServiceClient`; it carries plain JSON both ways."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
from urllib3.exceptions import MaxRetryError
from urllib3.util.retry import Retry

from pipeline import http

log = logging.getLogger(__name__)

__all__ = ["ServiceClient", "ServiceError", "Unreachable"]

_CHUNK = 1 << 20


class ServiceError(RuntimeError):
    """The service answered with an error (4xx, or 5xx after the retries the policy allows); `status`
    is its code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class Unreachable(ServiceError):
    """No answer from the service after the retries (connection refused, reset, timed out), or
    a 503 (the service answers but its store does not: `service.app`'s store_unavailable)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, message)


def _error_of(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500] or response.reason
    if not isinstance(body, dict):
        return str(body)
    message = str(body.get("error", body.get("message", body)))
    fields = body.get("errors")   # our 4xx bodies name each field at fault: keep them in the message
    if isinstance(fields, list) and fields:
        message += ": " + "; ".join(f"{e.get('field')}: {e.get('reason')}" if isinstance(e, dict) else str(e)
                                    for e in fields[:5])
    return message


def _attempts(n: int) -> str:
    return f"{n} attempt{'s' * (n != 1)}"


class ServiceClient:
    def __init__(self, base_url: str, token: str, *, timeout_s: float = 30.0, retries: int = 5,
                 backoff_s: float = 0.5, backoff_max_s: float = 10.0,
                 sleep: Callable[[float], None] = time.sleep, api_prefix: str = "/api/v1") -> None:
        """`api_prefix`: what paths are relative to (ours; "" for another service's REST API)."""
        self.base_url = base_url.rstrip("/")
        self.api_prefix = api_prefix.rstrip("/")
        self.timeout_s, self.retries = timeout_s, retries
        self.backoff_s, self.backoff_max_s = backoff_s, backoff_max_s
        self._sleep = sleep
        self._headers = {"User-Agent": "benchfarm-agent", **({"Authorization": f"Bearer {token}"} if token else {})}
        self._sessions: dict[int, requests.Session] = {}
        self._lock = threading.Lock()

    def url(self, path: str) -> str:
        return f"{self.base_url}{self.api_prefix}/{path.lstrip('/')}"

    def _session(self, retries: int) -> requests.Session:
        """The session retrying `retries` times (one per count asked for: the heartbeat's 0, the rest's)."""
        with self._lock:
            if retries not in self._sessions:
                made = http.session(http.retry_policy(retries, backoff_s=self.backoff_s,
                                                      backoff_max_s=self.backoff_max_s, sleep=self._sleep))
                made.headers.update(self._headers)
                self._sessions[retries] = made
            return self._sessions[retries]

    def request(self, method: str, path: str, *, json: Any = None, data: bytes | None = None,
                timeout_s: float | None = None, retries: int | None = None, stream: bool = False,
                idempotent: bool = False) -> requests.Response:
        """One request under `pipeline.http`'s policy; a 4xx raises ServiceError at once, no answer
        (or only 503s) Unreachable. `idempotent`: the service treats a repeat of this POST as the
        same request, so it carries an Idempotency-Key and is retried like a GET."""
        retries = self.retries if retries is None else retries
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if idempotent:
            headers.update(http.idempotency_key())
        what = f"{method} {path}"
        try:
            response = self._session(retries).request(method, self.url(path), json=json, data=data, headers=headers,
                                                      timeout=timeout_s or self.timeout_s, stream=stream)
        except (requests.ConnectionError, requests.Timeout) as exc:
            if isinstance(exc.args[0] if exc.args else None, MaxRetryError):
                raise Unreachable(f"{self.base_url} unreachable after {_attempts(retries + 1)}; last: {what}: "
                                  f"{type(exc).__name__}: {exc}") from None
            raise Unreachable(f"{self.base_url}: no answer to {what} ({type(exc).__name__}: {exc}); not sent "
                              "again, as the service may have carried it out") from None
        if response.status_code >= 400:
            retried = getattr(response.raw, "retries", None)   # urllib3's Retry in effect: its history
            attempts = len(retried.history) + 1 if isinstance(retried, Retry) else 1
            message = _error_of(response)
            log.debug("%s: HTTP %d: %s (attempt %d)", what, response.status_code, message, attempts)
            if response.status_code == 503:   # the service is up, its store is not: wait, as for no answer
                raise Unreachable(f"{self.base_url} unavailable after {_attempts(attempts)}; "
                                  f"last: {what}: HTTP 503: {message}")
            raise ServiceError(response.status_code, message)
        return response

    def get(self, path: str, **kwargs: Any) -> Any:
        response = self.request("GET", path, **kwargs)
        return response.json() if response.content else None

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        """POST a JSON body; `idempotent=True` where the service treats a repeat as the same request."""
        response = self.request("POST", path, json=body, **kwargs)
        return response.json() if response.status_code != 204 and response.content else None

    def post_raw(self, path: str, data: bytes, **kwargs: Any) -> Any:
        """POST a JSON body already serialised (a spooled document, sent byte for byte)."""
        return self.request("POST", path, data=data, **kwargs).json()

    def download(self, path: str, dest: Path) -> str:
        """Stream a file to `dest` (written atomically); returns its sha256."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial = dest.with_name(dest.name + f".part-{os.getpid()}")
        digest = hashlib.sha256()
        with self.request("GET", path, stream=True) as response, partial.open("wb") as out:
            for chunk in response.iter_content(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
        os.replace(partial, dest)
        return digest.hexdigest()
