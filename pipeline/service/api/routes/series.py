"""Series (case x device class x metric): their history per commit, change points and settings; a case's
hardware counters on a device class along the same history (`pipeline.results.store.counters`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Query

from pipeline.service.api.deps import RowId, SessionDep, SettingsDep, require_scope
from pipeline.service.api.schemas import ERROR_RESPONSES, ErrorBody, SeriesSettingsIn
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.results.store import analysis, counters, queries, series
from pipeline.results.store.counters import CounterHistoryOut
from pipeline.results.store.queries import SeriesDetailOut

router = APIRouter(route_class=StrictJsonRoute, tags=["series"])


@router.get("/series", summary="List series with their latest median")
def list_series(session: SessionDep, limit: int = Query(500, ge=1, le=10000)) -> list[dict[str, Any]]:
    return [s.model_dump() for s in queries.list_series(session, limit=limit)]


def _detail(session: SessionDep, series_id: RowId) -> SeriesDetailOut:
    found = queries.series_detail(session, series_id)
    if found is None:
        raise HTTPException(404, f"no series {series_id}")
    return found


@router.get("/series/{series_id}", response_model=SeriesDetailOut,
            summary="One series: history per commit, change points, baseline and settings",
            responses={404: {"model": ErrorBody}})
def get_series(series_id: RowId, session: SessionDep) -> SeriesDetailOut:
    return _detail(session, series_id)


@router.get("/counter-series", response_model=CounterHistoryOut, responses={404: {"model": ErrorBody}},
            summary="A case's hardware counters on one device class along history, and their steps",
            description="Instructions executed, DRAM bytes read and written, L2 hit rate and achieved occupancy, "
                        "commit by commit in the order of the case's latency series (ancestry along the default "
                        "branch), each commit without counters saying why; a step wherever a counter moved beyond "
                        "its tolerance against the previous commit with it (`steps`). "
                        "Deterministic figures: computed when read, never triaged, never a verdict. 404: no series "
                        "of that case on that device class.")
def get_counter_series(session: SessionDep, case: str, device_class: str) -> CounterHistoryOut:
    found = counters.counter_history(session, case_id=case, device_class=device_class)
    if found is None:
        raise HTTPException(404, f"no series of {case} on {device_class}")
    return found


@router.put(
    "/series/{series_id}/settings", response_model=SeriesDetailOut,
    summary="Set a series' minimum magnitude and direction (user scope), then analyse it again",
    description="null restores the default. Stored change points keep their direction and triage; the series is "
                "analysed again at once with the new settings.",
    responses={**ERROR_RESPONSES, 404: {"model": ErrorBody}},
    dependencies=[require_scope("user")],
)
def put_series_settings(series_id: RowId, request: SeriesSettingsIn, session: SessionDep,
                        settings: SettingsDep) -> SeriesDetailOut:
    if not series.set_series_settings(session, series_id, min_magnitude=request.min_magnitude,
                                      lower_is_better=request.lower_is_better):
        raise HTTPException(404, f"no series {series_id}")
    analysis.analyze_series(session, series_id, settings.analysis)
    return _detail(session, series_id)
