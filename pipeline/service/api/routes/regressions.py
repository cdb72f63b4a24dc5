"""Regressions: change points of the default-branch histories that got worse, for triage."""

from __future__ import annotations

from fastapi import APIRouter, Query

from pipeline.service.api.deps import SessionDep
from pipeline.service.api.schemas import TriageState
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.results.store import queries
from pipeline.results.store.queries import ChangePointOut, Lifecycle

router = APIRouter(route_class=StrictJsonRoute, tags=["regressions"])


@router.get(
    "/regressions", response_model=list[ChangePointOut], summary="Open regressions, newest commit first",
    description="Regression change points in an open state (needs triage, confirmed, assigned), not retracted, that "
                "no later intended change point of their series superseded (suspected ones included: see "
                "`lifecycle`); with `state` and/or `lifecycle`, every regression in that triage state and lifecycle.",
)
def list_regressions(
    session: SessionDep, device_class: str | None = None, family: str | None = None,
    state: TriageState | None = None, lifecycle: Lifecycle | None = None, limit: int = Query(100, ge=1, le=1000),
) -> list[ChangePointOut]:
    return queries.list_regressions(session, device_class=device_class, family=family, state=state,
                                    lifecycle=lifecycle, limit=limit)
