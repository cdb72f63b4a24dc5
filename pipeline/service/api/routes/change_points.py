"""Change points: one with its triage history and newest bisection, and triage (user scope)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException

from pipeline.service.api.deps import Principal, RowId, SessionDep, require_scope
from pipeline.service.api.schemas import ERROR_RESPONSES, ErrorBody, TriageIn
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.results.store import queries, triage
from pipeline.results.store.queries import ChangePointDetailOut

router = APIRouter(route_class=StrictJsonRoute, tags=["change points"])
UserDep = Annotated[Principal, require_scope("user")]


def _detail(session: SessionDep, change_point_id: RowId) -> ChangePointDetailOut:
    found = queries.change_point_detail(session, change_point_id)
    if found is None:
        raise HTTPException(404, f"no change point {change_point_id}")
    return found


@router.get("/change-points/{change_point_id}", response_model=ChangePointDetailOut,
            summary="One change point with its triage history", responses={404: {"model": ErrorBody}})
def get_change_point(change_point_id: RowId, session: SessionDep) -> ChangePointDetailOut:
    return _detail(session, change_point_id)


@router.post(
    "/change-points/{change_point_id}/triage", response_model=ChangePointDetailOut,
    summary="Move a change point to a triage state (user scope)",
    description="Recorded as a triage event by the token's name, now. confirmed needs `bug_link`, assigned needs "
                "`assignee`; moves not allowed from the current state are refused (422). intended rebases the "
                "series: earlier change points stop counting as open.",
    responses={**ERROR_RESPONSES, 404: {"model": ErrorBody}},
)
def triage_change_point(
    change_point_id: RowId, request: TriageIn, session: SessionDep, principal: UserDep,
) -> ChangePointDetailOut:
    try:
        triage.triage(session, change_point_id=change_point_id, state=request.state, who=principal.name,
                      bug_link=request.bug_link, assignee=request.assignee, note=request.note)
    except LookupError as exc:
        raise HTTPException(404, str(exc)) from None
    return _detail(session, change_point_id)
