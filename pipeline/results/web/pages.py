"""Browsing pages: the dashboard, a run, a series' history, the roofline of a device class."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse

from pipeline.pr_comments.table import STATUS_ORDER
from pipeline.results import queries
from pipeline.results.api.deps import SessionDep, SettingsDep
from pipeline.results.api.routes.runs import run_comparisons
from pipeline.results.web import data
from pipeline.results.web.chart import roofline_svg
from pipeline.results.web.data import parse_case
from pipeline.results.web.render import page
from pipeline.results.web.session import UserDep, browse_guard

router = APIRouter(include_in_schema=False, dependencies=[Depends(browse_guard)])


def _matches(case_id: str, *, dtype: str, impl: str, text: str) -> bool:
    parts = parse_case(case_id)
    return ((not dtype or parts[3] == dtype) and (not impl or parts[4] == impl)
            and (not text or text in case_id.lower()))


@router.get("/", response_class=HTMLResponse)
def dashboard(request: Request, session: SessionDep, user: UserDep, family: str = "", device_class: str = "",
              dtype: str = "", impl: str = "", q: str = "", state: str = "") -> HTMLResponse:
    """Every series' state by family and device class; filters; counts; the newest runs."""
    full = queries.dashboard(session)
    options: dict[str, set[str]] = {"family": set(), "device_class": set(), "dtype": set(), "impl": set()}
    groups = []
    total = dict.fromkeys(queries.SERIES_STATES, 0)
    text = q.strip().lower()
    for group in full.groups:
        options["family"].add(group.family)
        options["device_class"].add(group.device_class)
        for s in group.series:
            parts = parse_case(s.case_id)
            options["dtype"].add(parts[3])
            options["impl"].add(parts[4])
        if (family and group.family != family) or (device_class and group.device_class != device_class):
            continue
        members = [s for s in group.series if _matches(s.case_id, dtype=dtype, impl=impl, text=text)]
        counts = dict.fromkeys(queries.SERIES_STATES, 0)
        for s in members:
            counts[s.state] += 1
            total[s.state] += 1
        shown = [s for s in members if not state or s.state == state]
        if shown:
            groups.append({"family": group.family, "device_class": group.device_class, "counts": counts,
                           "series": shown})
    filters = {"family": family, "device_class": device_class, "dtype": dtype, "impl": impl, "q": q, "state": state}
    return page(request, "index.html", user, {
        "groups": groups, "counts": total, "filters": filters, "states": queries.SERIES_STATES,
        "options": {k: sorted(v) for k, v in options.items()}, "series_total": sum(total.values()),
        "runs": queries.list_runs(session, limit=10)})


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(run_id: str, request: Request, session: SessionDep, settings: SettingsDep, user: UserDep) -> HTMLResponse:
    detail = queries.get_run(session, run_id)
    if detail is None:
        raise HTTPException(404, f"no run {run_id}")
    comparisons = run_comparisons(session, settings, detail)
    for comparison in comparisons:
        comparison.rows.sort(key=lambda r: (STATUS_ORDER.index(r.status), r.case_id))
    series_ids = data.latency_series_ids(session, [j.device_class for j in detail.jobs])
    return page(request, "run.html", user, {"detail": detail, "comparisons": comparisons, "series_ids": series_ids})


@router.get("/series/{series_id}", response_class=HTMLResponse)
def series_page(series_id: int, request: Request, session: SessionDep, user: UserDep) -> HTMLResponse:
    """The history graph (median, min-max, change points, the vendor control) and the table of values."""
    summary = queries.get_series(session, series_id)
    if summary is None:
        raise HTTPException(404, f"no series {series_id}")
    history = queries.series_history(session, series_id)
    change_points = queries.series_change_points(session, series_id)
    control = data.control_series(session, series_id)
    control_history = queries.series_history(session, control[0]) if control else []
    infos = data.commit_infos(session, [p.sha for p in history])
    position = {p.sha: i for i, p in enumerate(history)}
    control_by_sha = {p.sha: p.median for p in control_history}
    marks = {cp.after_sha: cp for cp in change_points}
    chart: dict[str, Any] = {
        "series_id": series_id, "unit": "s" if summary.metric == "latency" else summary.metric,
        "sha": [p.sha for p in history], "time": [p.committed_at.isoformat() for p in history],
        "message": [data_first_line(infos.get(p.sha)) for p in history],
        "median": [p.median for p in history], "min": [p.min for p in history], "max": [p.max for p in history],
        "n": [p.n for p in history],
        "control": {"case_id": control[1], "series_id": control[0],
                    "median": [control_by_sha.get(p.sha) for p in history]} if control else None,
        "change_points": [{"id": cp.id, "index": position[cp.after_sha], "direction": cp.direction,
                           "state": cp.state, "magnitude": cp.magnitude, "open": cp.open}
                          for cp in change_points if cp.after_sha in position],
    }
    return page(request, "series.html", user, {
        "summary": summary, "history": history, "change_points": change_points, "marks": marks, "infos": infos,
        "chart": chart, "control": control, "baseline": queries.series_baseline(session, series_id)})


def data_first_line(info: data.CommitInfo | None) -> str:
    return (info.message.strip().splitlines() or [""])[0][:200] if info else ""


@router.get("/series/{series_id}/samples")
def series_samples(series_id: int, sha: str, session: SessionDep) -> JSONResponse:
    """Every sample of one commit on the series (the graph fetches them on hover)."""
    samples = data.commit_samples(session, series_id, sha)
    if samples is None:
        raise HTTPException(404, f"no measurement of {sha} on series {series_id}")
    return JSONResponse({"sha": sha, "samples": samples})


@router.get("/roofline", response_class=HTMLResponse)
def roofline(request: Request, session: SessionDep, settings: SettingsDep, user: UserDep,
             device_class: str = "") -> HTMLResponse:
    """Each case's achieved FLOP/s against the device class's compute and bandwidth ceilings."""
    names = data.device_class_names(session)
    device_class = device_class or (names[0] if names else "")
    points = data.roofline_points(session, device_class) if device_class else []
    configured = settings.web.ceilings.get(device_class, {})
    best_flops = max((p.flop_rate for p in points), default=None)
    best_bytes = max((p.byte_rate for p in points), default=None)
    ceilings = {"flops": configured.get("flops") or best_flops, "bytes": configured.get("bytes") or best_bytes,
                "flops_source": "setting" if configured.get("flops") else "best measured case",
                "bytes_source": "setting" if configured.get("bytes") else "best measured case"}
    return page(request, "roofline.html", user, {
        "device_classes": names, "device_class": device_class, "points": points, "ceilings": ceilings,
        "chart": roofline_svg(points, ceilings["flops"], ceilings["bytes"]) if points else None})
