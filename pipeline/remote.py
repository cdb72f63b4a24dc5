"""`benchfarm trigger` and `benchfarm jobs`: ad-hoc runs and the job queue, through the service's API."""

from __future__ import annotations

from typing import Any

from pipeline.agents.client import ServiceClient
from pipeline.config import Settings

__all__ = ["list_jobs", "trigger"]


def _client(settings: Settings, server: str | None, token: str | None) -> ServiceClient:
    url = server or settings.agent.server_url or settings.public_url
    bearer = token or settings.api_token.get_secret_value() or settings.agent.token.get_secret_value()
    return ServiceClient(url, bearer, timeout_s=settings.agent.timeout_s, retries=2)


def trigger(settings: Settings, *, ref: str | None, commit: str | None, device_classes: list[str],
            cases: str | None, repository: str | None = None, server: str | None = None,
            token: str | None = None) -> dict[str, Any]:
    body = {"ref": ref, "commit": commit, "device_classes": device_classes, "cases": cases, "repository": repository}
    result: dict[str, Any] = _client(settings, server, token).post("runs", body)
    return result


def list_jobs(settings: Settings, *, status: str | None = None, run_id: str | None = None, limit: int = 50,
              server: str | None = None, token: str | None = None) -> list[dict[str, Any]]:
    params = "&".join(f"{k}={v}" for k, v in (("status", status), ("run_id", run_id), ("limit", limit)) if v)
    jobs: list[dict[str, Any]] = _client(settings, server, token).get(f"jobs?{params}")
    return jobs
