"""Runs: what was benchmarked, its jobs, and the comparison of its commit with its base on each device class."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Query

from pipeline.service.api.deps import SessionDep, SettingsDep
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.results.store import queries
from pipeline.results.store.compare import ComparisonOut, compare

router = APIRouter(route_class=StrictJsonRoute, tags=["runs"])


def run_comparisons(session: SessionDep, settings: SettingsDep, detail: queries.RunDetail) -> list[ComparisonOut]:
    """The comparison of the run's own results on each device class where it has results so far
    (another run of the same commit never shows here)."""
    comparisons = (
        compare(session, repository=detail.run.repository, head_sha=detail.run.commit_sha,
                device_class=job.device_class, settings=settings.compare, run_id=detail.run.id)
        for job in detail.jobs
    )
    return [c for c in comparisons if c.rows]


@router.get("/runs")
def list_runs(session: SessionDep, limit: int = Query(50, ge=1, le=1000)) -> list[dict[str, Any]]:
    return [run.model_dump() for run in queries.list_runs(session, limit=limit)]


@router.get("/runs/{run_id}")
def get_run(run_id: str, session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    detail = queries.get_run(session, run_id)
    if detail is None:
        raise HTTPException(404, f"no run {run_id}")
    return {**detail.model_dump(), "comparisons": [c.model_dump() for c in run_comparisons(session, settings, detail)]}
