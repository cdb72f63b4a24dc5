"""`benchfarm trigger`, `benchfarm jobs`, `benchfarm bisect` and `benchfarm resend`: ad-hoc runs, the
job queue, bisections and kept results, through the service's API."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pipeline.agents.client import ServiceClient, ServiceError
from pipeline.agents.upload import deliver, load_kept
from pipeline.config import Settings

__all__ = ["bisect", "bisect_target", "list_jobs", "resend", "trigger"]


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


_TARGET = re.compile(r"(?:^|/|#)(series|cp|change-points?|bisections?)[/-](\d+)/?$")


def bisect_target(text: str) -> tuple[str, int]:
    """("series_id" | "change_point_id" | "bisection_id", id) from what `benchfarm bisect` was given:
    `series/ID`, `cp/ID` (or `change-point/ID`), or an address of the web UI naming one
    (`.../series/ID`, `.../regressions#cp-ID`); `bisection/ID` shows a bisection. ValueError otherwise."""
    match = _TARGET.search(text.strip())
    if match is None:
        raise ValueError(f"{text!r} names neither a series nor a change point: give series/ID (the series "
                         "page's address ends with it) or cp/ID (a change point; the regressions page links #cp-ID)")
    kind, number = match.group(1), int(match.group(2))
    field = {"series": "series_id", "bisection": "bisection_id", "bisections": "bisection_id"}.get(kind, "change_point_id")
    return field, number


def bisect(settings: Settings, *, series_id: int | None = None, change_point_id: int | None = None,
           server: str | None = None, token: str | None = None) -> dict[str, Any]:
    """Request a bisection (POST /api/v1/bisections); the bisection's document."""
    body = {"series_id": series_id} if series_id is not None else {"change_point_id": change_point_id}
    result: dict[str, Any] = _client(settings, server, token).post("bisections", body)
    return result


def get_bisection(settings: Settings, bisection_id: int, *, server: str | None = None,
                  token: str | None = None) -> dict[str, Any]:
    result: dict[str, Any] = _client(settings, server, token).get(f"bisections/{bisection_id}")
    return result


def list_jobs(settings: Settings, *, status: str | None = None, run_id: str | None = None, limit: int = 50,
              server: str | None = None, token: str | None = None) -> list[dict[str, Any]]:
    params = "&".join(f"{k}={v}" for k, v in (("status", status), ("run_id", run_id), ("limit", limit)) if v)
    jobs: list[dict[str, Any]] = _client(settings, server, token).get(f"jobs?{params}")
    return jobs


def resend(settings: Settings, path: Path, *, server: str | None = None, token: str | None = None) -> dict[str, Any]:
    """Deliver a result document the agent kept (spool/rejected/<job>.json, or a bare document), in
    chunks as the agent does, then mark its job done when the file names the agent that ran it.
    The file is left in place: it is the measurements' only copy until the caller removes it."""
    document, agent = load_kept(path)
    client = _client(settings, server, token)
    delivered = deliver(client, document, budget_bytes=settings.agent.upload_chunk_bytes)
    job_state = "left as it is (the file names no agent)"
    if agent:
        try:
            job_state = client.post(f"jobs/{document['job_id']}/complete", {"agent": agent}, idempotent=True)["status"]
        except ServiceError as exc:
            job_state = f"not marked done: {exc}"
    return {"job_id": document["job_id"], "chunks": delivered.chunks, "stored": delivered.stored,
            "duplicates": delivered.duplicates, "samples": delivered.samples, "job": job_state}
