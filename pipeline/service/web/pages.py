"""Browsing pages: the dashboard, a run, a series' history, the roofline of a device class, the
compile series."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from markupsafe import Markup

from pipeline.contracts import METRICS
from pipeline.contracts.counters import COUNTERS
from pipeline.pr_comments.table import format_change
from pipeline.service.api.deps import RowId, SessionDep, SettingsDep
from pipeline.service.web.chart import roofline_chart, step_chart
from pipeline.service.web.farm import redirect_to_full_id
from pipeline.service.web.paging import paginate
from pipeline.service.web.render import format_amount, page
from pipeline.service.web.session import UserDep, browse_guard
from pipeline.service.web.verdicts import NEWEST_RUNS, cached_comparison, run_verdicts
from pipeline.results.store import compile_stats, queries
from pipeline.results.store.bisect_views import latest_by_change_point, one_commit_ranges
from pipeline.results.store.compare import only_cases
from pipeline.results.store.commits import CommitDescription, describe_commits, repositories
from pipeline.results.store.counters import TOLERANCES, CounterHistoryOut, counter_history
from pipeline.results.store.roofline import roofline_points
from pipeline.results.store.runs import run_case_ids
from pipeline.results.store.series import (
    commit_samples,
    control_series,
    dashboard_options,
    device_class_names,
    device_class_targets,
    latency_series_ids,
)

router = APIRouter(include_in_schema=False, dependencies=[Depends(browse_guard)])


@router.get("/", response_class=HTMLResponse)
def dashboard(request: Request, session: SessionDep, settings: SettingsDep, user: UserDep, family: str = "",
              device_class: str = "", dtype: str = "", impl: str = "", q: str = "", state: str = "") -> HTMLResponse:
    """Every series' state by family and device class (the first `web.dashboard_tiles` of each
    group, regressed and improved first; a group's own view lists more); filters; counts; the
    newest runs with their verdicts (each run's own comparison with its base, as its page shows it)."""
    state = state if state in queries.SERIES_STATES else ""
    one_group = bool(family and device_class)
    board = queries.dashboard(session, family=family or None, device_class=device_class or None,
                              dtype=dtype or None, impl=impl or None, text=q.strip() or None, state=state or None,
                              per_group=settings.web.group_tiles if one_group else settings.web.dashboard_tiles)
    filters = {"family": family, "device_class": device_class, "dtype": dtype, "impl": impl, "q": q, "state": state}
    runs = queries.list_runs(session, limit=NEWEST_RUNS)
    return page(request, "index.html", user, {
        "groups": [g for g in board.groups if g.series], "counts": board.counts, "filters": filters,
        "states": queries.SERIES_STATES, "options": dashboard_options(session),
        "group_tiles": settings.web.group_tiles,
        # the series these filters match, the state included (the counts above are per state)
        "series_total": board.counts.get(state, 0) if state else sum(board.counts.values()),
        "runs": runs, "verdicts": run_verdicts(session, settings, runs)})


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(run_id: str, request: Request, session: SessionDep, settings: SettingsDep, user: UserDep) -> Response:
    """The run's jobs, and on each device class where they stored results the comparison of the
    run's own results (not the rest of its commit's, nor another run's of the same cases): changes first, the first `web.page_rows` rows (the compare page has them all)."""
    detail = queries.get_run(session, run_id)
    if detail is None:
        return redirect_to_full_id(session, "run", run_id, "/runs/")
    ran = run_case_ids(session, run_id)
    comparisons = [only_cases(c, ran[dc]) for dc in dict.fromkeys(j.device_class for j in detail.jobs) if dc in ran
                   if (c := cached_comparison(session, settings, detail.run.repository, detail.run.commit_sha, None,
                                              dc, None, run_id)).rows]
    comparisons = [c for c in comparisons if c.rows]
    shown = {c.device_class: c.rows[:settings.web.page_rows] for c in comparisons}
    series_ids = latency_series_ids(session, list(shown), case_ids={r.case_id for rows in shown.values()
                                                                         for r in rows})
    return page(request, "run.html", user, {"detail": detail, "comparisons": comparisons, "shown": shown,
                                            "series_ids": series_ids})


@router.get("/series/{series_id}", response_class=HTMLResponse)
def series_page(series_id: RowId, request: Request, session: SessionDep, user: UserDep) -> HTMLResponse:
    """The history graph (median, min-max, change points, the vendor control), the change points with
    their bisections, the hardware counters of the case on the device class along the same history
    (a step chart per counter, the commits where one moved marked, why a commit has none), and the
    table of values."""
    summary = queries.get_series(session, series_id)
    if summary is None:
        raise HTTPException(404, f"no series {series_id}")
    history = queries.series_history(session, series_id)
    change_points = queries.series_change_points(session, series_id)
    control = control_series(session, series_id)
    control_history = queries.series_history(session, control[0]) if control else []
    counters = counter_history(session, case_id=summary.case_id, device_class=summary.device_class)
    shas = [p.sha for p in history] + [p.sha for p in (counters.history if counters else [])]
    infos = describe_commits(session, shas)
    position = {p.sha: i for i, p in enumerate(history)}
    control_by_sha = {p.sha: p.median for p in control_history}
    marks = {cp.after_sha: cp for cp in change_points if cp.lifecycle != "retracted"}
    chart: dict[str, Any] = {
        "series_id": series_id, "unit": "s" if summary.metric == "latency" else summary.metric,
        "sha": [p.sha for p in history], "time": [p.committed_at.isoformat() for p in history],
        "message": [data_first_line(infos.get(p.sha)) for p in history],
        "median": [p.median for p in history], "min": [p.min for p in history], "max": [p.max for p in history],
        "n": [p.n for p in history], "runs": [p.runs for p in history],
        "control": {"case_id": str(control[1]), "series_id": control[0],
                    "median": [control_by_sha.get(p.sha) for p in history]} if control else None,
        "change_points": [{"id": cp.id, "index": position[cp.after_sha], "direction": cp.direction,
                           "state": cp.state, "magnitude": cp.magnitude, "open": cp.open, "lifecycle": cp.lifecycle}
                          for cp in change_points if cp.after_sha in position],
    }
    return page(request, "series.html", user, {
        "summary": summary, "history": history, "change_points": change_points, "marks": marks, "infos": infos,
        "counters": counters, "counter_charts": counter_charts(counters), "counter_moves": counter_moves(counters),
        "counter_labels": {name: c.label for name, c in COUNTERS.items()}, "counter_tolerances": TOLERANCES,
        "bisections": latest_by_change_point(session, [cp.id for cp in change_points]),
        "one_commit": one_commit_ranges(session, [cp.id for cp in change_points]),
        "chart": chart, "control": control, "baseline": queries.series_baseline(session, series_id),
        "compile_series": compile_stats.compile_targets(session, summary.case_id,
                                                        device_class_targets(session, summary.device_class))})


def counter_charts(counters: CounterHistoryOut | None) -> list[Markup]:
    """A step chart per counter read along the history, its steps marked (`counters.counter_history`)."""
    if counters is None or not counters.units:
        return []
    labels = [f"{p.sha[:10]} {p.committed_at:%Y-%m-%d}" for p in counters.history]
    position = {p.sha: i for i, p in enumerate(counters.history)}
    return [step_chart([p.values.get(name) for p in counters.history], labels, COUNTERS[name].label, unit,
                     steps=[position[s.after_sha] for s in counters.steps if s.counter == name],
                     ticks=[p.sha[:7] for p in counters.history], css_class="counter-chart")
            for name, unit in counters.units.items()]


def counter_moves(counters: CounterHistoryOut | None) -> dict[str, dict[str, str]]:
    """sha -> counter -> how it moved there against the previous commit with it: "+18.0 %"; a rate in
    points ("-9.5 pt"); a change too small for a tenth of a percent as the difference ("+1 instr": a
    step is never shown as "+0.0 %")."""
    out: dict[str, dict[str, str]] = {}
    for s in counters.steps if counters else []:
        counter, difference = COUNTERS[s.counter], s.after - s.before
        if counter.percent:
            shown = f"{difference:+.1f} pt"
        elif s.change is not None and abs(s.change) >= 0.0005:
            shown = format_change(s.change)
        else:
            shown = ("+" if difference > 0 else "-") + format_amount(abs(difference), counter.unit)
        out.setdefault(s.after_sha, {})[s.counter] = shown
    return out


def data_first_line(info: CommitDescription | None) -> str:
    return (info.message.strip().splitlines() or [""])[0][:200] if info else ""


@router.get("/series/{series_id}/samples")
def series_samples(series_id: RowId, sha: str, session: SessionDep) -> JSONResponse:
    """Every sample of one commit on the series (the graph fetches them on hover)."""
    samples = commit_samples(session, series_id, sha)
    if samples is None:
        raise HTTPException(404, f"no measurement of {sha} on series {series_id}")
    return JSONResponse({"sha": sha, "samples": samples})


@router.get("/roofline", response_class=HTMLResponse)
def roofline(request: Request, session: SessionDep, settings: SettingsDep, user: UserDep,
             device_class: str = "", order: str = "case", page_number: int = Query(1, alias="page")) -> HTMLResponse:
    """Each case's achieved FLOP/s against the device class's compute and bandwidth ceilings; the
    table by case or furthest below the roof first, a page at a time; the cases left off, named."""
    names = device_class_names(session)
    device_class = device_class or (names[0] if names else "")
    points, left_off = roofline_points(session, device_class) if device_class else ([], [])
    configured = settings.web.ceilings.get(device_class, {})
    best_flops = max((p.flop_rate for p in points), default=None)
    best_bytes = max((p.byte_rate for p in points), default=None)
    peak_flops, peak_bytes = configured.get("flops") or best_flops, configured.get("bytes") or best_bytes
    ceilings = {"flops": peak_flops, "bytes": peak_bytes,
                "flops_source": "setting" if configured.get("flops") else "best measured case",
                "bytes_source": "setting" if configured.get("bytes") else "best measured case"}
    shares = {p.series_id: p.share_of_roof(peak_flops, peak_bytes) for p in points}
    order = order if order in ("case", "share") else "case"
    rows = sorted(points, key=lambda p: (shares[p.series_id] is None, shares[p.series_id] or 0.0, str(p.case_id))) \
        if order == "share" else points
    return page(request, "roofline.html", user, {
        "device_classes": names, "device_class": device_class, "points": points, "ceilings": ceilings,
        "left_off": left_off, "unplaced": [p for p in points if not p.intensity],
        "rows": paginate(rows, page_number, settings.web.page_rows), "shares": shares, "order": order,
        "chart": roofline_chart(points, peak_flops, peak_bytes)})


@router.get("/compile", response_class=HTMLResponse)
def compile_list(request: Request, session: SessionDep, user: UserDep, repository: str = "") -> HTMLResponse:
    """Every compile series (case x target) of a repository with its newest figures: build-only
    targets included, which no device runs."""
    names = repositories(session)
    repository = repository if repository in names else (names[0] if names else "")
    series = compile_stats.list_compile_series(session, repository) if repository else []
    return page(request, "compile_list.html", user, {"repositories": names, "repository": repository,
                                                     "series": series})


@router.get("/compile/history", response_class=HTMLResponse)
def compile_history_page(request: Request, session: SessionDep, user: UserDep, repository: str, case: str,
                         target: str) -> HTMLResponse:
    """One compile series: a step chart per metric and the table, commit by commit."""
    history = compile_stats.compile_history(session, repository, case, target)
    if not history:
        raise HTTPException(404, f"no compile statistics for {case} on {target} in {repository}")
    labels = [f"{p.sha[:10]} {p.committed_at:%Y-%m-%d}" for p in history]
    steps = compile_stats.compile_steps(history)
    position = {p.sha: i for i, p in enumerate(history)}  # one point per commit
    charts = [step_chart([p.values[m] for p in history], labels, m, METRICS[m].unit,
                       steps=[position[s.after_sha] for s in steps if s.metric == m],
                       ticks=[p.sha[:7] for p in history])
              for m in compile_stats.METRIC_COLUMNS]
    return page(request, "compile_history.html", user, {"repository": repository, "case": case, "target": target,
                                                        "history": history, "charts": charts, "steps": steps,
                                                        "metrics": list(compile_stats.METRIC_COLUMNS)})
