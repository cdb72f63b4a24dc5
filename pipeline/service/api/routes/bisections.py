"""Bisections: request one for a change point or a series (user scope), read them with their steps."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, ConfigDict, Field

from pipeline.contracts.limits import RowRef
from pipeline.orchestration.dispatch import bisect
from pipeline.service.api.deps import (
    MAX_ROW_ID,
    Principal,
    RowId,
    SessionDep,
    SettingsDep,
    require_scope,
)
from pipeline.service.api.schemas import ERROR_RESPONSES, ErrorBody
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.results.store.bisect_views import BisectionView, get_bisection, list_bisections
from pipeline.results.store.states import BISECTION_STATES

router = APIRouter(route_class=StrictJsonRoute, tags=["bisections"])
UserDep = Annotated[Principal, require_scope("user")]


class BisectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    change_point_id: RowRef | None = Field(default=None, description="the change point to bisect")
    series_id: RowRef | None = Field(default=None,
                                  description="or a series: its newest confirmed (else suspected) change point")


@router.post(
    "/bisections", response_model=BisectionView, status_code=201,
    summary="Bisect a change point's commit range to the commit that made it (user scope)",
    description="Queued at once; the service builds the range's first-parent commits, runs them paired with the "
                "range's base on the change point's device class with its case only, and narrows down to the "
                "culprit. 409 while the change point has an active bisection (its id is in the message); 422 when "
                "there is nothing to bisect (retracted, or a range of one commit).",
    responses={**ERROR_RESPONSES, 404: {"model": ErrorBody}, 409: {"model": ErrorBody}},
)
def request_bisection(body: BisectRequest, session: SessionDep, settings: SettingsDep,
                      principal: UserDep) -> BisectionView:
    if (body.change_point_id is None) == (body.series_id is None):
        raise HTTPException(422, "change_point_id / series_id: give exactly one")
    try:
        change_point_id = body.change_point_id or bisect.change_point_of_series(session, body.series_id or 0)
        made = bisect.request_bisection(session, settings, change_point_id=change_point_id, who=principal.name)
    except bisect.BisectNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except bisect.BisectConflict as exc:
        raise HTTPException(409, str(exc)) from None
    except bisect.BisectError as exc:
        raise HTTPException(422, str(exc)) from None
    return made


@router.get("/bisections", response_model=list[BisectionView], summary="Bisections, newest first, with their steps")
def bisections(session: SessionDep, change_point_id: int | None = Query(None, ge=1, le=MAX_ROW_ID),
               state: str | None = Query(None, description=f"one of {', '.join(BISECTION_STATES)}"),
               limit: int = Query(50, ge=1, le=500)) -> list[BisectionView]:
    if state is not None and state not in BISECTION_STATES:
        raise HTTPException(422, f"state: {state!r} is not one of {', '.join(BISECTION_STATES)}")
    return list_bisections(session, change_point_id=change_point_id, state=state, limit=limit)


@router.get("/bisections/{bisection_id}", response_model=BisectionView, summary="One bisection with its steps",
            responses={404: {"model": ErrorBody}})
def bisection(bisection_id: RowId, session: SessionDep) -> BisectionView:
    found = get_bisection(session, bisection_id)
    if found is None:
        raise HTTPException(404, f"no bisection {bisection_id}")
    return found
