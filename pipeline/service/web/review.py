"""Reviewing pages: compare two commits (the PR comment's verdict table) and triage regressions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse

from pipeline.orchestration.dispatch import bisect
from pipeline.service.api.deps import RowId, SessionDep, SettingsDep
from pipeline.service.api.schemas import TriageIn
from pipeline.service.web.paging import paginate
from pipeline.service.web.render import page
from pipeline.service.web.session import (
    UserDep,
    browse_guard,
    checked_form,
    form_model,
    require_signed_in,
    safe_next,
)
from pipeline.service.web.verdicts import (
    NEWEST_RUNS,
    ROW_ORDERS,
    cached_verdict,
    run_verdicts,
)
from pipeline.results.store import code, commit_refs, compile_stats, queries, triage
from pipeline.results.store.bisect_views import latest_by_change_point, one_commit_ranges
from pipeline.results.store.code import CodeChangeOut
from pipeline.results.store.compare import STATUSES, CompareError, ComparisonRowOut
from pipeline.results.store.commits import describe_commits, pull_request_head, repositories
from pipeline.results.store.series import device_class_names, latency_series_ids
from pipeline.results.store.states import LIFECYCLE, TRIAGE_STATES

router = APIRouter(include_in_schema=False, dependencies=[Depends(browse_guard)])


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request, session: SessionDep, settings: SettingsDep, user: UserDep, repository: str = "",
    head: str = "", base: str = "", device_class: str = "", pr: str = "", merge_base: str = "",
    status: str = "", q: str = "", order: str = "verdict", page_number: int = Query(1, alias="page"),
) -> HTMLResponse:
    """Any two commits, or a pull request and its base, on one or every device class: the verdict
    table of each, filtered by status or text, in pages of `web.page_rows` rows, with what changed
    in each case's code; the changed kernels' listings side by side; then the compile statistics
    that changed (beside the verdict, never part of it)."""
    repos = repositories(session)
    repository = repository or (repos[0] if len(repos) == 1 else "")
    order = order if order in ROW_ORDERS else "verdict"
    status = status if status in STATUSES else ""
    form = {"repository": repository, "head": head, "base": base, "device_class": device_class, "pr": pr,
            "merge_base": merge_base, "status": status, "q": q, "order": order}
    context: dict[str, Any] = {"form": form, "repositories": repos, "device_classes": device_class_names(session),
               "verdict": None, "error": None, "commits": [], "series_ids": {}, "infos": {}, "tables": [],
               "compiled": None, "code_diffs": [], "code_hidden": 0, "code_anchors": {},
               "code_context": CODE_CONTEXT,
               "statuses": STATUSES, "rows_per_page": settings.web.page_rows,
               "max_pvalue": settings.compare.max_pvalue}
    if repository:
        context["commits"] = queries.list_commits(session, repository=repository, limit=30)
    head_sha, error = _head(session, repository, head, pr)
    base_sha, base_error = _ref(session, repository, base) if base else (None, None)
    error = error or base_error
    if head_sha and not error:
        try:
            verdict = cached_verdict(session, settings, repository, head_sha, base_sha, device_class or None,
                                      merge_base or None)
        except CompareError as exc:
            error = str(exc)
        else:
            text = q.strip().lower()
            tables = []
            for comparison in verdict.comparisons:
                rows = [r for r in comparison.rows
                        if (not status or r.status == status) and (not text or text in str(r.case_id).lower())]
                if order != "verdict":  # the cached rows are in verdict order already
                    rows.sort(key=ROW_ORDERS[order])
                tables.append((comparison, paginate(rows, page_number, settings.web.page_rows)))
            context["verdict"] = verdict
            context["tables"] = tables
            context["pages"] = max((t.pages for _, t in tables), default=1)
            context["page_number"] = min(max(1, page_number), context["pages"])
            context["series_ids"] = latency_series_ids(
                session, [c.device_class for c in verdict.comparisons],
                case_ids={r.case_id for _, t in tables for r in t.items})
            diffs, context["code_hidden"] = _code_diffs(session, [r for _, t in tables for r in t.items])
            context["code_diffs"] = diffs
            context["code_anchors"] = {(d.case_id, d.target): d.anchor for d in diffs}
            context["compiled"] = compiled = compile_stats.compare_compile(
                session, repository, head_sha=head_sha, base_sha=base_sha,
                latency_bases=(c.base_sha for c in verdict.comparisons), walk=settings.compare.ancestor_walk)
            context["infos"] = describe_commits(
                session, [head_sha] + [c.base_sha for c in verdict.comparisons if c.base_sha]
                + ([compiled.base_sha] if compiled.base_sha else []))
    context["error"] = error
    return page(request, "compare.html", user, context, status_code=404 if error and (head or pr) else 200)


CODE_CONTEXT = 3
"""Equal lines shown around each changed part of a listing diff."""
CODE_DIFFS = 20
"""Changed kernels whose listings a page shows side by side (those of its rows first)."""


@dataclass(frozen=True)
class _CodeDiff:
    anchor: str
    case_id: str
    target: str
    summary: str
    base_digest: str
    head_digest: str
    rows: list[code.DiffRow]
    left_out: int


def _code_diffs(session: SessionDep, rows: Sequence[ComparisonRowOut]) -> tuple[list[_CodeDiff], int]:
    """The side-by-side listing diffs of the changed kernels among `rows` (once per case and target,
    in the rows' order; both listings stored), at most CODE_DIFFS; and how many more there were."""
    changed: dict[tuple[str, str], CodeChangeOut] = {}
    for r in rows:
        if r.code is not None and r.code.state == "changed" and r.code.diff:
            changed.setdefault((str(r.case_id), r.target), r.code)
    shown = list(changed.items())[:CODE_DIFFS]
    texts = code.listings(session, [d for _, c in shown for d in (c.base_digest, c.head_digest) if d])
    out = []
    for number, ((case_id, target), c) in enumerate(shown, start=1):
        if c.base_digest in texts and c.head_digest in texts:
            diff_rows, left_out = code.side_by_side(texts[c.base_digest], texts[c.head_digest],
                                                    context=CODE_CONTEXT)
            out.append(_CodeDiff(f"code-{number}", case_id, target, c.summary, c.base_digest,
                                 c.head_digest, diff_rows, left_out))
    return out, len(changed) - len(shown)


def _ref(session: SessionDep, repository: str, ref: str) -> tuple[str | None, str | None]:
    try:
        return commit_refs.resolve_commit(session, ref, repository=repository)[1], None
    except commit_refs.CommitRefError as exc:
        return None, str(exc)


def _head(session: SessionDep, repository: str, head: str, pr: str) -> tuple[str | None, str | None]:
    if not repository or not (head or pr):
        return None, None
    if head:
        return _ref(session, repository, head)
    if not pr.strip().lstrip("#").isdigit():
        return None, f"pull request {pr!r} is not a number"
    sha = pull_request_head(session, repository, int(pr.strip().lstrip("#")))
    return (sha, None) if sha else (None, f"no recorded commit of pull request #{pr.strip().lstrip('#')}")


@router.get("/regressions", response_class=HTMLResponse)
def regressions_page(request: Request, session: SessionDep, settings: SettingsDep, user: UserDep,
                     device_class: str = "", family: str = "", state: str = "", lifecycle: str = "") -> HTMLResponse:
    """Open regressions (or all in one triage state and/or lifecycle: suspected, confirmed,
    retracted) with their triage history, their bisection and actions: change points of the history.
    Above them, the newest runs whose own verdict is regressed (a run's comparison is not a change
    point: said so, with links)."""
    found = queries.list_regressions(session, device_class=device_class or None, family=family or None,
                                     state=state if state in TRIAGE_STATES else None,
                                     lifecycle=lifecycle if lifecycle in LIFECYCLE else None, limit=500)
    histories = triage.triage_histories(session, [r.id for r in found])
    bisections = latest_by_change_point(session, [r.id for r in found])
    runs = queries.list_runs(session, limit=NEWEST_RUNS)
    verdicts = run_verdicts(session, settings, runs)
    regressed_runs = [(r, v) for r in runs if (v := verdicts.get(r.id)) is not None and v.verdict == "regressed"]
    return page(request, "regressions.html", user, {
        "regressed_runs": regressed_runs,
        "regressions": found, "histories": histories, "bisections": bisections, "transitions": triage.TRANSITIONS,
        "one_commit": one_commit_ranges(session, [r.id for r in found]),
        "states": TRIAGE_STATES, "lifecycles": LIFECYCLE, "device_classes": device_class_names(session),
        "filters": {"device_class": device_class, "family": family, "state": state, "lifecycle": lifecycle},
        "infos": describe_commits(session, [r.after_sha for r in found])})


@router.post("/change-points/{change_point_id}/triage")
async def triage_form(change_point_id: RowId, request: Request, session: SessionDep, user: UserDep) -> RedirectResponse:
    """The triage form of the regressions and series pages (signed-in users, CSRF-checked)."""
    principal = require_signed_in(request, user, "triage")
    form = await checked_form(request)
    back = safe_next(form.get("next", "/regressions"))
    # the API's request (POST /api/v1/change-points/ID/triage): its states and limits; an empty field is none
    asked = form_model(TriageIn, {"state": form.get("state", ""), "note": form.get("note", ""),
                                  "bug_link": form.get("bug_link") or None, "assignee": form.get("assignee") or None})
    try:   # off the event loop (a write that may wait on the store: see web/account.py's login)
        await run_in_threadpool(triage.triage, session, change_point_id=change_point_id, state=asked.state,
                                who=principal.name, bug_link=asked.bug_link, assignee=asked.assignee, note=asked.note)
    except LookupError:
        raise HTTPException(404, f"no change point {change_point_id}") from None
    except triage.TriageError as exc:
        request.session["flash"] = {"kind": "error", "text": f"change point {change_point_id}: {exc}"}
    else:
        request.session["flash"] = {"kind": "ok", "text": f"change point {change_point_id} is now {asked.state}"}
    return RedirectResponse(back, status_code=303)


@router.post("/change-points/{change_point_id}/bisect")
async def bisect_form(change_point_id: RowId, request: Request, session: SessionDep, settings: SettingsDep,
                      user: UserDep) -> RedirectResponse:
    """The Bisect button of the regressions and series pages (signed-in users, CSRF-checked)."""
    principal = require_signed_in(request, user, "bisect")
    form = await checked_form(request)
    back = safe_next(form.get("next", "/regressions"))
    try:
        made = await run_in_threadpool(bisect.request_bisection, session, settings, change_point_id=change_point_id,
                                       who=principal.name)
    except bisect.BisectNotFound:
        raise HTTPException(404, f"no change point {change_point_id}") from None
    except bisect.BisectError as exc:
        request.session["flash"] = {"kind": "error", "text": str(exc).removeprefix("change_point_id: ")}
    else:
        request.session["flash"] = {"kind": "ok", "text": f"bisection {made.id} of change point {change_point_id} "
                                                          "queued: its steps appear here as they run"}
    return RedirectResponse(back, status_code=303)
