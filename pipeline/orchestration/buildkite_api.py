"""Buildkite's REST API, the one call benchfarm makes: create a build of a commit
(`POST /v2/organizations/{org}/pipelines/{pipeline}/builds`, Bearer token with `write_builds`).

Used when Buildkite is configured (`buildkite.api_token`, `organization`, `pipeline`): a GitHub
delivery then becomes a Buildkite build whose first step uploads `benchfarm pipeline`'s steps.
Retried on connection errors and 5xx; a refused token (401/403) or a refused build (4xx) is
reported at once with Buildkite's message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests

from pipeline.config import BuildkiteSettings

__all__ = ["BuildkiteError", "CreatedBuild", "configured", "create_build"]


class BuildkiteError(RuntimeError):
    """Buildkite refused the request, or could not be reached after the retries."""


@dataclass(frozen=True)
class CreatedBuild:
    number: int
    web_url: str


def configured(settings: BuildkiteSettings) -> bool:
    return bool(settings.api_token.get_secret_value() and settings.organization and settings.pipeline)


def create_build(settings: BuildkiteSettings, *, commit: str, branch: str, message: str,
                 env: dict[str, str] | None = None, meta_data: dict[str, str] | None = None,
                 pull_request: dict[str, Any] | None = None, retries: int = 3, backoff_s: float = 0.5,
                 sleep: Callable[[float], None] = time.sleep) -> CreatedBuild:
    """Create a build of `commit` on `branch` (Buildkite's documented body: commit, branch, message,
    env, meta_data, pull_request_*). Returns its number and web URL."""
    url = (f"{settings.api_url.rstrip('/')}/v2/organizations/{settings.organization}/pipelines/"
           f"{settings.pipeline}/builds")
    body: dict[str, Any] = {"commit": commit, "branch": branch, "message": message, "env": env or {},
                            "meta_data": meta_data or {}}
    if pull_request:
        body.update({f"pull_request_{k}": v for k, v in pull_request.items()})
    headers = {"Authorization": f"Bearer {settings.api_token.get_secret_value()}"}
    last = ""
    for attempt in range(retries + 1):
        if attempt:
            sleep(backoff_s * 2 ** (attempt - 1))
        try:
            response = requests.post(url, json=body, headers=headers, timeout=30)
        except requests.RequestException as exc:
            last = f"{type(exc).__name__}: {exc}"
            continue
        if response.status_code >= 500:
            last = f"HTTP {response.status_code}: {response.text[:300]}"
            continue
        if response.status_code in (401, 403):
            raise BuildkiteError(f"Buildkite refused the API token (HTTP {response.status_code}: "
                                 f"{_message(response)}); it needs the write_builds scope on {settings.organization}")
        if response.status_code >= 400:
            raise BuildkiteError(f"Buildkite refused the build (HTTP {response.status_code}): {_message(response)}")
        data = response.json()
        return CreatedBuild(number=int(data["number"]), web_url=str(data.get("web_url", "")))
    raise BuildkiteError(f"Buildkite unreachable at {url} after {retries + 1} attempts; last: {last}")


def _message(response: requests.Response) -> str:
    try:
        return str(response.json().get("message", response.text[:300]))
    except ValueError:
        return response.text[:300]
