"""The dashboard: every series' state, grouped by family and device class."""

from __future__ import annotations

from fastapi import APIRouter

from pipeline.service.api.deps import SessionDep
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.results.store import queries
from pipeline.results.store.queries import DashboardOut

router = APIRouter(route_class=StrictJsonRoute, tags=["dashboard"])


@router.get(
    "/dashboard", response_model=DashboardOut, summary="Every series' state by family and device class, with counts",
    description="regressed: an open regression change point; improved: an open improvement; stable: none open; "
                "no data: no default-branch measurement. One aggregate query.",
)
def get_dashboard(session: SessionDep, device_class: str | None = None, family: str | None = None) -> DashboardOut:
    return queries.dashboard(session, device_class=device_class, family=family)
