"""Farm pages: agents and their devices with the queue per device class, the jobs with their states
and errors, one job's story, and the ad-hoc run form (which posts to POST /api/v1/runs, as the CLI
does, and follows the run's jobs through GET /api/v1/jobs until its results are in)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from pipeline.service.api.deps import SessionDep, SettingsDep
from pipeline.service.web.render import page
from pipeline.service.web.session import SignInRequired, UserDep, browse_guard
from pipeline.results.store import commits, farm, queue, runs, series
from pipeline.results.store.states import JOB_STATUSES

router = APIRouter(include_in_schema=False, dependencies=[Depends(browse_guard)])

JOBS_SHOWN = 200


@router.get("/devices", response_class=HTMLResponse)
def devices_page(request: Request, session: SessionDep, settings: SettingsDep, user: UserDep) -> HTMLResponse:
    """Each agent, its devices, online or not, what runs on them; the queue of each device class."""
    return page(request, "devices.html", user, {"farm": farm.farm(session),
                                                "offline_after_s": settings.dispatch.agent_offline_s})


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(request: Request, session: SessionDep, user: UserDep, status: str = "", device_class: str = "",
              agent: str = "", run: str = "", page_number: int = Query(1, alias="page", ge=1)) -> HTMLResponse:
    """Jobs, newest first, `JOBS_SHOWN` a page, with their state, attempts, timings and errors;
    filters (a run by its id or the start of it, as pages show it)."""
    if status and status not in JOB_STATUSES:
        raise HTTPException(422, f"status {status!r} is not one of {', '.join(JOB_STATUSES)}")
    run_ids = runs.ids_starting_with(session, "run", run.strip()) if run.strip() else []
    if run.strip() and len(run_ids) != 1:
        raise HTTPException(404, f"run {run.strip()!r} {'is ambiguous' if run_ids else 'matches no run'}")
    found = queue.list_jobs(session, status=status or None, device_class=device_class or None, agent=agent or None,
                            run_id=run_ids[0] if run_ids else None, limit=JOBS_SHOWN + 1,
                            offset=(page_number - 1) * JOBS_SHOWN)
    filters = {"status": status, "device_class": device_class, "agent": agent, "run": run}
    return page(request, "jobs.html", user, {
        "jobs": found[:JOBS_SHOWN], "counts": farm.job_counts(session), "statuses": JOB_STATUSES,
        "limit": JOBS_SHOWN, "device_classes": series.device_class_names(session), "filters": filters,
        "page_number": page_number, "more": len(found) > JOBS_SHOWN})


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(job_id: str, request: Request, session: SessionDep, user: UserDep) -> Response:
    """One job: its timeline, its error, the cases that did not pass and the run's other jobs."""
    detail = farm.job_detail(session, job_id)
    if detail is None:
        return redirect_to_full_id(session, "job", job_id, "/jobs/")
    return page(request, "job.html", user, {"detail": detail})


def redirect_to_full_id(session: SessionDep, what: Literal["run", "job"], text: str, prefix: str) -> RedirectResponse:
    """A short id typed into the address (pages show the first 12 characters): its page, when it
    names one run or job; else 404 saying what it matched."""
    found = runs.ids_starting_with(session, what, text)
    if len(found) != 1 or found[0] == text:
        raise HTTPException(404, f"{what} {text!r} {'is ambiguous: give more of it' if found else 'does not exist'}")
    return RedirectResponse(prefix + found[0], status_code=307)


@router.get("/runs/new", response_class=HTMLResponse)
def adhoc_page(request: Request, session: SessionDep, settings: SettingsDep, user: UserDep,
               ref: str = "", device_class: str = "", cases: str = "") -> HTMLResponse:
    """The ad-hoc run form (signed-in users). Its script posts to the API with the session's CSRF
    token and shows the jobs' progress until the run ends, then opens the run's page."""
    if user is None or not user.allows("user"):
        raise SignInRequired(request.url.path + (f"?{request.url.query}" if request.url.query else ""),
                             "sign in to trigger a run")
    repositories = commits.repositories(session)
    default_repository = settings.repository or (repositories[0] if len(repositories) == 1 else "")
    classes = farm.trigger_classes(session)
    checked = device_class or next((name for name, online in classes if online), None)   # as the form checks it
    return page(request, "adhoc.html", user, {
        "classes": classes, "repositories": repositories,
        "cases_example": farm.cases_example(session, checked),
        "default_repository": default_repository, "has_checkout": bool(settings.dispatch.suite_path),
        "form": {"ref": ref or ("HEAD" if settings.dispatch.suite_path else ""), "device_class": device_class,
                 "cases": cases}})
