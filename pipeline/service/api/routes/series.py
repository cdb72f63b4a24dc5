"""Series (case x device class x metric): their history per commit, change points and settings."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, HTTPException, Query

from pipeline.service.api.deps import RowId, SessionDep, SettingsDep, require_scope
from pipeline.service.api.schemas import (
    ERROR_RESPONSES,
    BaselineOut,
    ChangePointOut,
    ErrorBody,
    HistoryPointOut,
    SeriesDetailOut,
    SeriesSettingsIn,
    SeriesSettingsOut,
    as_answer,
)
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.store import analysis, queries
from pipeline.store.models import Series

router = APIRouter(route_class=StrictJsonRoute, tags=["series"])


@router.get("/series", summary="List series with their latest median")
def list_series(session: SessionDep, limit: int = Query(500, ge=1, le=10000)) -> list[dict[str, Any]]:
    return [as_answer(s) for s in queries.list_series(session, limit=limit)]


def _settings(row: Series) -> SeriesSettingsOut:
    return SeriesSettingsOut(min_magnitude=row.min_magnitude, lower_is_better=analysis.series_direction(row),
                             lower_is_better_override=row.lower_is_better)


def _detail(session: SessionDep, series_id: RowId) -> SeriesDetailOut:
    summary = queries.get_series(session, series_id)
    row = session.get(Series, series_id)
    if summary is None or row is None:
        raise HTTPException(404, f"no series {series_id}")
    baseline = queries.series_baseline(session, series_id)
    return SeriesDetailOut(
        **asdict(summary), settings=_settings(row),
        baseline=BaselineOut.model_validate(baseline) if baseline else None,
        history=[HistoryPointOut.model_validate(p) for p in queries.series_history(session, series_id)],
        change_points=[ChangePointOut.model_validate(cp) for cp in queries.series_change_points(session, series_id)],
    )


@router.get("/series/{series_id}", response_model=SeriesDetailOut,
            summary="One series: history per commit, change points, baseline and settings",
            responses={404: {"model": ErrorBody}})
def get_series(series_id: RowId, session: SessionDep) -> SeriesDetailOut:
    return _detail(session, series_id)


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
    row = session.get(Series, series_id)
    if row is None:
        raise HTTPException(404, f"no series {series_id}")
    row.min_magnitude = request.min_magnitude
    row.lower_is_better = request.lower_is_better
    session.flush()
    analysis.analyze_series(session, series_id, settings.analysis)
    return _detail(session, series_id)
