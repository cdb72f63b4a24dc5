"""Series (case x device class x metric) and their history per commit."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, HTTPException, Query

from pipeline.results import queries
from pipeline.results.api.deps import SessionDep

router = APIRouter(tags=["series"])


@router.get("/series")
def list_series(session: SessionDep, limit: int = Query(500, ge=1, le=10000)) -> list[dict[str, Any]]:
    return [asdict(s) for s in queries.list_series(session, limit=limit)]


@router.get("/series/{series_id}")
def get_series(series_id: int, session: SessionDep) -> dict[str, Any]:
    summary = queries.get_series(session, series_id)
    if summary is None:
        raise HTTPException(404, f"no series {series_id}")
    return {**asdict(summary), "history": [asdict(p) for p in queries.series_history(session, series_id)]}
