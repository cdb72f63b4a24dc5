"""Buildkite's REST API, the one call benchfarm makes: create a build of a commit
(`POST /v2/organizations/{org}/pipelines/{pipeline}/builds`, Bearer token with `write_builds`).

Used when Buildkite is configured (`buildkite.api_token`, `organization`, `pipeline`): a GitHub
delivery, or an ad-hoc run (`POST /api/v1/runs`, `benchfarm trigger`), then becomes a Buildkite build
whose first step uploads `benchfarm pipeline`'s steps.
Sent with the project's one HTTP client (`ServiceClient`, under `pipeline.http`'s policy): Buildkite
takes no Idempotency-Key, so the POST is retried only when the connection could not be opened; a
502/503/504 or a lost answer is reported, not sent again (the build may have been created: a second
POST would make a second build). A refused token (401/403) or build (4xx) is reported at once with
Buildkite's message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline.agents.client import ServiceClient, ServiceError, Unreachable
from pipeline.config import BuildkiteSettings

__all__ = ["BuildkiteError", "CreatedBuild", "configured", "create_build"]


class BuildkiteError(RuntimeError):
    """Buildkite refused the request, or could not be reached after the retries."""


@dataclass(frozen=True)
class CreatedBuild:
    number: int
    web_url: str
    id: str   # the build's UUID (BUILDKITE_BUILD_ID in its steps)


def configured(settings: BuildkiteSettings) -> bool:
    return bool(settings.api_token.get_secret_value() and settings.organization and settings.pipeline)


def create_build(settings: BuildkiteSettings, *, commit: str, branch: str, message: str,
                 env: dict[str, str] | None = None, meta_data: dict[str, str] | None = None,
                 pull_request: dict[str, Any] | None = None, retries: int = 3, backoff_s: float = 0.5,
                 sleep: Callable[[float], None] = time.sleep) -> CreatedBuild:
    """Create a build of `commit` on `branch` (Buildkite's documented body: commit, branch, message,
    env, meta_data, pull_request_*). Returns its number and web URL."""
    path = f"v2/organizations/{settings.organization}/pipelines/{settings.pipeline}/builds"
    body: dict[str, Any] = {"commit": commit, "branch": branch, "message": message, "env": env or {},
                            "meta_data": meta_data or {}}
    if pull_request:
        body.update({f"pull_request_{k}": v for k, v in pull_request.items()})
    client = ServiceClient(settings.api_url, settings.api_token.get_secret_value(), timeout_s=30, retries=retries,
                           backoff_s=backoff_s, sleep=sleep, api_prefix="")
    try:
        data = client.post(path, body)
    except Unreachable as exc:   # no connection after the retries, or no answer / a 503 to the POST
        raise BuildkiteError(f"Buildkite unreachable: {exc.message}") from None
    except ServiceError as exc:
        if exc.status in (401, 403):
            raise BuildkiteError(f"Buildkite refused the API token (HTTP {exc.status}: {exc.message}); it needs "
                                 f"the write_builds scope on {settings.organization}") from None
        if exc.status >= 500:
            raise BuildkiteError(f"Buildkite answered HTTP {exc.status} at {client.url(path)}: {exc.message}; the "
                                 f"build of {commit[:10]} may have been created: look at the pipeline's builds before "
                                 "triggering again") from None
        raise BuildkiteError(f"Buildkite refused the build (HTTP {exc.status}): {exc.message}") from None
    return CreatedBuild(number=int(data["number"]), web_url=str(data.get("web_url", "")), id=str(data.get("id", "")))
