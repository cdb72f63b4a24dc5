"""Reviewing pages: compare two commits (the PR comment's verdict table) and triage regressions."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from pipeline.pr_comments.table import STATUS_ORDER
from pipeline.results import queries, triage
from pipeline.results.api.deps import SessionDep, SettingsDep
from pipeline.results.compare import (
    CompareError,
    PRVerdict,
    compare,
    compare_all,
    overall_verdict,
)
from pipeline.results.models import TRIAGE_STATES
from pipeline.results.web import data
from pipeline.results.web.render import page
from pipeline.results.web.session import (
    UserDep,
    browse_guard,
    checked_form,
    require_signed_in,
    safe_next,
)

router = APIRouter(include_in_schema=False, dependencies=[Depends(browse_guard)])


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request, session: SessionDep, settings: SettingsDep, user: UserDep, repository: str = "",
    head: str = "", base: str = "", device_class: str = "", pr: str = "", merge_base: str = "",
) -> HTMLResponse:
    """Any two commits, or a pull request and its base, on one or every device class."""
    repos = data.repositories(session)
    repository = repository or (repos[0] if len(repos) == 1 else "")
    form = {"repository": repository, "head": head, "base": base, "device_class": device_class, "pr": pr}
    context = {"form": form, "repositories": repos, "device_classes": data.device_class_names(session),
               "verdict": None, "error": None, "commits": [], "series_ids": {}, "infos": {},
               "max_pvalue": settings.compare.max_pvalue}
    if repository:
        context["commits"] = queries.list_commits(session, repository=repository, limit=30)
    head_sha, error = _head(session, repository, head, pr)
    base_sha, base_error = _ref(session, repository, base) if base else (None, None)
    error = error or base_error
    if head_sha and not error:
        try:
            verdict = _verdict(session, settings, repository, head_sha, base_sha, device_class or None,
                               merge_base or None)
        except CompareError as exc:
            error = str(exc)
        else:
            context["verdict"] = verdict
            context["series_ids"] = data.latency_series_ids(session, [c.device_class for c in verdict.comparisons])
            context["infos"] = data.commit_infos(
                session, [head_sha] + [c.base_sha for c in verdict.comparisons if c.base_sha])
    context["error"] = error
    return page(request, "compare.html", user, context, status_code=404 if error and (head or pr) else 200)


def _ref(session: SessionDep, repository: str, ref: str) -> tuple[str | None, str | None]:
    found = data.resolve_commit(session, repository, ref)
    if len(found) == 1:
        return found[0], None
    if not found:
        return None, f"no recorded commit {ref!r} in {repository or 'any repository'}"
    return None, f"{ref!r} names several commits: give more of the sha"


def _head(session: SessionDep, repository: str, head: str, pr: str) -> tuple[str | None, str | None]:
    if not repository or not (head or pr):
        return None, None
    if head:
        return _ref(session, repository, head)
    if not pr.strip().lstrip("#").isdigit():
        return None, f"pull request {pr!r} is not a number"
    sha = data.pull_request_head(session, repository, int(pr.strip().lstrip("#")))
    return (sha, None) if sha else (None, f"no recorded commit of pull request #{pr.strip().lstrip('#')}")


VERDICT_CACHE_SIZE = 64
VERDICT_CACHE_TTL_S = 300.0
"""Verdicts are kept per (inputs, store version) for this long at most: `data.store_version` sees
new uploads and commits; the limit bounds what it cannot see (a row changed in place)."""
_verdicts: OrderedDict[tuple[object, ...], tuple[float, PRVerdict]] = OrderedDict()
_verdicts_lock = threading.Lock()


def _verdict(session: SessionDep, settings: SettingsDep, repository: str, head: str, base: str | None,
             device_class: str | None, merge_base: str | None) -> PRVerdict:
    """The comparison, from the cache when the store has not changed since it was made (each rank
    test costs about a millisecond: a few hundred cases would be most of the page's time)."""
    key = (str(session.get_bind().engine.url), settings.compare.model_dump_json(), repository, head, base, device_class,
           merge_base, data.store_version(session))
    now = time.monotonic()
    with _verdicts_lock:
        hit = _verdicts.get(key)
        if hit is not None and now - hit[0] < VERDICT_CACHE_TTL_S:
            _verdicts.move_to_end(key)
            return hit[1]
    verdict = _compute_verdict(session, settings, repository, head, base, device_class, merge_base)
    for comparison in verdict.comparisons:
        comparison.rows.sort(key=lambda r: (STATUS_ORDER.index(r.status), r.case_id, r.target))
    with _verdicts_lock:
        _verdicts[key] = (now, verdict)
        while len(_verdicts) > VERDICT_CACHE_SIZE:
            _verdicts.popitem(last=False)
    return verdict


def _compute_verdict(session: SessionDep, settings: SettingsDep, repository: str, head: str, base: str | None,
                     device_class: str | None, merge_base: str | None) -> PRVerdict:
    if device_class is None:
        return compare_all(session, repository=repository, head_sha=head, settings=settings.compare,
                           base_sha=base, merge_base=merge_base)
    one = compare(session, repository=repository, head_sha=head, device_class=device_class,
                  settings=settings.compare, base_sha=base, merge_base=merge_base)
    return PRVerdict(repository=repository, head_sha=head, comparisons=[one], verdict=overall_verdict(one.rows),
                     errored=one.errored, counts=one.counts)


@router.get("/regressions", response_class=HTMLResponse)
def regressions_page(request: Request, session: SessionDep, user: UserDep, device_class: str = "",
                     family: str = "", state: str = "") -> HTMLResponse:
    """Open regressions (or all in one triage state) with their triage history and actions."""
    found = queries.list_regressions(session, device_class=device_class or None, family=family or None,
                                     state=state if state in TRIAGE_STATES else None, limit=500)
    histories = data.triage_histories(session, [r.id for r in found])
    return page(request, "regressions.html", user, {
        "regressions": found, "histories": histories, "transitions": triage.TRANSITIONS,
        "states": TRIAGE_STATES, "device_classes": data.device_class_names(session),
        "filters": {"device_class": device_class, "family": family, "state": state},
        "infos": data.commit_infos(session, [r.after_sha for r in found])})


@router.post("/change-points/{change_point_id}/triage")
async def triage_form(change_point_id: int, request: Request, session: SessionDep, user: UserDep) -> RedirectResponse:
    """The triage form of the regressions and series pages (signed-in users, CSRF-checked)."""
    principal = require_signed_in(request, user, "triage")
    form = await checked_form(request)
    back = safe_next(form.get("next", "/regressions"))
    try:
        triage.triage(session, change_point_id=change_point_id, state=form.get("state", ""), who=principal.name,
                      bug_link=form.get("bug_link") or None, assignee=form.get("assignee") or None,
                      note=form.get("note", ""))
    except LookupError:
        raise HTTPException(404, f"no change point {change_point_id}") from None
    except triage.TriageError as exc:
        request.session["flash"] = {"kind": "error", "text": f"change point {change_point_id}: {exc}"}
    else:
        request.session["flash"] = {"kind": "ok", "text": f"change point {change_point_id} is now {form['state']}"}
    return RedirectResponse(back, status_code=303)
