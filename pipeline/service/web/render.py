"""The templates (Jinja2, autoescaped) and the filters every page shares."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlparse

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape

from pipeline.pr_comments.markdown import keep_figures
from pipeline.pr_comments.table import (
    change_note,
    format_change,
    format_figure,
    format_pvalue,
    format_seconds,
    row_change,
    row_counters,
    row_status,
    summary_line,
)
from pipeline.service.api.deps import principal_of
from pipeline.service.auth import Principal
from pipeline.service.web.session import csrf_token
from pipeline.results.store.compare import status_label
from pipeline.results.store.db import session_scope

templates = Jinja2Templates(directory=Path(__file__).parent / "templates")


def commit_url(repository_url: str | None, sha: str) -> str | None:
    """The commit's page on its host, for an http(s) repository URL only (never javascript: and the like)."""
    if not repository_url:
        return None
    parsed = urlparse(repository_url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        return None
    return f"{repository_url.rstrip('/').removesuffix('.git')}/commit/{sha}"


def format_rate(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def format_amount(value: float, unit: str) -> str:
    """A deterministic figure (compile statistics, hardware counters) with its unit as people read it:
    "805 ms", "12.3 KiB", "71 regs", "1,048,576 instr" (a count whole, so that a difference of one
    shows), "61.2 %"."""
    if unit == "s":
        return format_seconds(value)
    if unit == "%":
        return f"{value:.1f} %"
    if unit == "B" and abs(value) >= 1024:
        for prefix, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if abs(value) >= scale:
                return f"{value / scale:.3g} {prefix}"
    if float(value).is_integer():
        return f"{int(value):,} {unit}"
    return f"{value:.3g} {unit}" if abs(value) < 1000 else f"{value:,.1f} {unit}"


def query(path: str, /, **params: Any) -> str:
    """`path` with the non-empty params as its query string."""
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return path + ("?" + urlencode(kept) if kept else "")


def first_line(text: str | None, limit: int = 80) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def ago(when: datetime | None, now: datetime | None = None) -> str:
    """How long ago, coarsely: "12 s ago", "5 min ago", "3 h ago", "2 d ago"."""
    if when is None:
        return ""
    seconds = max(0.0, ((now or datetime.now(UTC)) - when).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def duration(start: datetime | None, end: datetime | None) -> str:
    """The time between two moments ("1.4 s", "3 min 5 s"); empty when either is missing."""
    if start is None or end is None:
        return ""
    seconds = max(0.0, (end - start).total_seconds())
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 120 else f"{minutes / 60:.1f} h"


def case_breaks(case_id: object) -> Markup:
    """A case id, HTML-escaped, that may wrap after each '/' (between its parts) and nowhere else."""
    return Markup(str(escape(str(case_id))).replace("/", "/<wbr>"))   # a line break hint, not a parse


templates.env.filters.update(seconds=format_seconds, change=format_change, pvalue=format_pvalue, rate=format_rate,
                             figure=format_figure, amount=format_amount, figures=keep_figures,
                             case_breaks=case_breaks,
                             row_change=row_change, row_status=row_status, status_label=status_label,
                             row_counters=row_counters,
                             first_line=first_line, slug=lambda s: str(s).replace(" ", "-"), ago=ago)
templates.env.globals.update(summary_line=summary_line, commit_url=commit_url, query=query, duration=duration,
                             change_note=change_note)


ERROR_TITLES = {400: "bad request", 401: "sign-in needed", 403: "refused", 404: "not found", 405: "not allowed",
                409: "conflict", 422: "bad request", 500: "server error",
                503: "unavailable"}


def wants_html(request: Request) -> bool:
    """A page's request (not the JSON API's, nor the API docs'), from a client that takes HTML: its
    errors are HTML pages. A client of a page or form that asks for JSON alone (`Accept:
    application/json`, no text/html: a script posting the triage form) gets the API's JSON error
    body, which names each field at fault (`form.note`), as an API client does; a browser sends
    text/html in its Accept and gets the page, which names them too."""
    if request.url.path.startswith(("/api/", "/openapi.json", "/docs", "/redoc")):
        return False
    accept = request.headers.get("accept", "").lower()
    return not ("application/json" in accept and "text/html" not in accept)


def error_page(request: Request, status_code: int, message: str, errors: list[dict[str, str]] | None = None,
               headers: Mapping[str, str] | None = None) -> HTMLResponse:
    """An error as a page with the navigation: what went wrong, and where to go from there."""
    try:
        with session_scope(request.app.state.engine) as session:
            user = principal_of(request, session, request.app.state.settings)
    except Exception:  # noqa: BLE001 - an error page must render even when the store does not answer
        user = None
    response = page(request, "error.html", user, {
        "status_code": status_code, "title": ERROR_TITLES.get(status_code, "error"), "message": message,
        "errors": errors or []}, status_code=status_code)
    response.headers.update(headers or {})
    return response


def page(request: Request, name: str, user: Principal | None, context: dict[str, Any],
         status_code: int = 200) -> HTMLResponse:
    flash = request.session.pop("flash", None)
    return templates.TemplateResponse(request, name, {
        **context, "user": user, "csrf": csrf_token(request), "flash": flash,
        "private": not request.app.state.settings.web.public}, status_code=status_code)
