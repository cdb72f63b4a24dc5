"""The one HTTP client of the agents: base URL, bearer token, timeouts, and retries with
exponential back-off on connection errors and 5xx answers. Everything the agent says to the
service goes through `ServiceClient`; it carries plain JSON both ways."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

log = logging.getLogger(__name__)

__all__ = ["ServiceClient", "ServiceError", "Unreachable"]

_RETRY_STATUSES = {500, 502, 503, 504}
_CHUNK = 1 << 20


class ServiceError(RuntimeError):
    """The service answered with an error (4xx, or 5xx after the retries); `status` is its code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class Unreachable(ServiceError):
    """No answer from the service after the retries (connection refused, reset, timed out), or
    only 503s (the service answers but its store does not: `service.app`'s store_unavailable)."""

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
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self.session.headers["User-Agent"] = "benchfarm-agent"

    def url(self, path: str) -> str:
        return f"{self.base_url}{self.api_prefix}/{path.lstrip('/')}"

    def request(self, method: str, path: str, *, json: Any = None, data: bytes | None = None,
                timeout_s: float | None = None, retries: int | None = None, stream: bool = False) -> requests.Response:
        """One request, retried on connection errors and 5xx; a 4xx raises ServiceError at once."""
        attempts = (self.retries if retries is None else retries) + 1
        headers = {"Content-Type": "application/json"} if data is not None else None
        last = ""
        for attempt in range(attempts):
            if attempt:
                self._sleep(min(self.backoff_max_s, self.backoff_s * 2 ** (attempt - 1)))
            try:
                response = self.session.request(method, self.url(path), json=json, data=data, headers=headers,
                                                timeout=timeout_s or self.timeout_s, stream=stream)
            except (requests.ConnectionError, requests.Timeout) as exc:
                last = f"{method} {path}: {type(exc).__name__}: {exc}"
                log.debug("%s (attempt %d of %d)", last, attempt + 1, attempts)
                continue
            if response.status_code in _RETRY_STATUSES:
                last = f"{method} {path}: HTTP {response.status_code}: {_error_of(response)}"
                log.debug("%s (attempt %d of %d)", last, attempt + 1, attempts)
                if attempt + 1 == attempts:
                    if response.status_code == 503:   # the service is up, its store is not: wait, as for no answer
                        raise Unreachable(f"{self.base_url} unavailable after {attempts} attempts; last: {last}")
                    raise ServiceError(response.status_code, _error_of(response))
                continue
            if response.status_code >= 400:
                raise ServiceError(response.status_code, _error_of(response))
            return response
        raise Unreachable(f"{self.base_url} unreachable after {attempts} attempts; last: {last}")

    def get(self, path: str, **kwargs: Any) -> Any:
        response = self.request("GET", path, **kwargs)
        return response.json() if response.content else None

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Any:
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
