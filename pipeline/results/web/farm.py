"""Farm pages: agents and their devices with the queue per device class, the jobs with their states
and errors, one job's story, and the ad-hoc run form (which posts to POST /api/v1/runs, as the CLI
does, and follows the run's jobs through GET /api/v1/jobs until its results are in)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse

from pipeline.results import dispatch
from pipeline.results.api.deps import SessionDep, SettingsDep
from pipeline.results.models import JOB_STATUSES
from pipeline.results.web import data, farm_data
from pipeline.results.web.render import page
from pipeline.results.web.session import SignInRequired, UserDep, browse_guard

router = APIRouter(include_in_schema=False, dependencies=[Depends(browse_guard)])

JOBS_SHOWN = 200


@router.get("/devices", response_class=HTMLResponse)
def devices_page(request: Request, session: SessionDep, settings: SettingsDep, user: UserDep) -> HTMLResponse:
    """Each agent, its devices, online or not, what runs on them; the queue of each device class."""
    return page(request, "devices.html", user, {"farm": farm_data.farm(session),
                                                "offline_after_s": settings.dispatch.agent_offline_s})


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(request: Request, session: SessionDep, user: UserDep, status: str = "", device_class: str = "",
              agent: str = "", run: str = "") -> HTMLResponse:
    """Jobs, newest first, with their state, attempts, timings and errors; filters."""
    jobs = dispatch.list_jobs(session, status=status if status in JOB_STATUSES else None,
                              device_class=device_class or None, agent=agent or None, run_id=run or None,
                              limit=JOBS_SHOWN)
    return page(request, "jobs.html", user, {
        "jobs": jobs, "counts": farm_data.job_counts(session), "statuses": JOB_STATUSES, "limit": JOBS_SHOWN,
        "device_classes": data.device_class_names(session),
        "filters": {"status": status, "device_class": device_class, "agent": agent, "run": run}})


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(job_id: str, request: Request, session: SessionDep, user: UserDep) -> HTMLResponse:
    """One job: its timeline, its error, the cases that did not pass and the run's other jobs."""
    detail = farm_data.job_detail(session, job_id)
    if detail is None:
        raise HTTPException(404, f"no job {job_id}")
    return page(request, "job.html", user, {"detail": detail})


@router.get("/runs/new", response_class=HTMLResponse)
def adhoc_page(request: Request, session: SessionDep, settings: SettingsDep, user: UserDep,
               ref: str = "", device_class: str = "", cases: str = "") -> HTMLResponse:
    """The ad-hoc run form (signed-in users). Its script posts to the API with the session's CSRF
    token and shows the jobs' progress until the run ends, then opens the run's page."""
    if user is None or not user.allows("user"):
        raise SignInRequired(request.url.path + (f"?{request.url.query}" if request.url.query else ""),
                             "sign in to trigger a run")
    repositories = data.repositories(session)
    default_repository = settings.repository or (repositories[0] if len(repositories) == 1 else "")
    return page(request, "adhoc.html", user, {
        "classes": farm_data.trigger_classes(session), "repositories": repositories,
        "default_repository": default_repository, "has_checkout": bool(settings.dispatch.suite_path),
        "form": {"ref": ref or ("HEAD" if settings.dispatch.suite_path else ""), "device_class": device_class,
                 "cases": cases}})
