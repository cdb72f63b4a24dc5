"""A small client of the service under test: posts with a token, and the store's snapshot."""

from __future__ import annotations

from typing import Any

import requests
from sqlalchemy import Engine

from pipeline.results.store.db import session_scope

from tests.helpers import factories as f


def post(url: str, path: str, body: bytes | str, token: str | None, **kwargs: Any) -> requests.Response:
    headers = {"content-type": "application/json", **kwargs.pop("headers", {})}
    if token:
        headers["authorization"] = f"Bearer {token}"
    return requests.post(f"{url}{path}", data=body, headers=headers, timeout=60, **kwargs)


def snapshot(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    with session_scope(engine) as s:
        return f.snapshot(s)
