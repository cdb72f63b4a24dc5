"""Page routes; the data comes from the same queries as the JSON API."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from pipeline.pr_comments.table import STATUS_ORDER, format_change, format_pvalue, format_seconds, summary_line
from pipeline.results import queries
from pipeline.results.api.deps import SessionDep, SettingsDep
from pipeline.results.api.routes.runs import run_comparisons
from pipeline.results.web.chart import history_svg

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
templates.env.filters.update(seconds=format_seconds, change=format_change, pvalue=format_pvalue)
templates.env.globals.update(summary_line=summary_line)


@router.get("/", response_class=HTMLResponse)
def index(request: Request, session: SessionDep) -> HTMLResponse:
    return templates.TemplateResponse(request, "index.html", {
        "runs": queries.list_runs(session, limit=50), "series": queries.list_series(session, limit=500)})


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(run_id: str, request: Request, session: SessionDep, settings: SettingsDep) -> HTMLResponse:
    detail = queries.get_run(session, run_id)
    if detail is None:
        raise HTTPException(404, f"no run {run_id}")
    comparisons = run_comparisons(session, settings, detail)
    for comparison in comparisons:
        comparison.rows.sort(key=lambda r: (STATUS_ORDER.index(r.status), r.case_id))
    series_ids = {(s.case_id, s.device_class): s.id for s in queries.list_series(session, limit=10000)}
    return templates.TemplateResponse(request, "run.html", {
        "detail": detail, "comparisons": comparisons, "series_ids": series_ids})


@router.get("/series/{series_id}", response_class=HTMLResponse)
def series_page(series_id: int, request: Request, session: SessionDep) -> HTMLResponse:
    summary = queries.get_series(session, series_id)
    if summary is None:
        raise HTTPException(404, f"no series {series_id}")
    history = queries.series_history(session, series_id)
    return templates.TemplateResponse(request, "series.html", {
        "summary": summary, "history": history, "chart": history_svg(history)})
