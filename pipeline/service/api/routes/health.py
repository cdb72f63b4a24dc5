"""GET /health: liveness, version and which store is behind the service; GET /whoami: which token
a caller holds (`benchfarm doctor` checks an agent's before it joins)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request

from pipeline import __version__
from pipeline.service import auth
from pipeline.service.api.deps import SessionDep, SettingsDep, bearer_token
from pipeline.service.api.schemas import ERROR_RESPONSES
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.results.store.db import database

router = APIRouter(route_class=StrictJsonRoute, tags=["health"])


@router.get("/health")
def health(session: SessionDep) -> dict[str, str]:
    return {"status": "ok", "version": __version__, "database": database(session)}


@router.get("/whoami", summary="The bearer token's name and scopes (any valid token)",
            responses={401: ERROR_RESPONSES[401]})
def whoami(request: Request, session: SessionDep, settings: SettingsDep) -> dict[str, object]:
    principal = auth.authenticate(session, token=bearer_token(request), bootstrap=settings.api_token.get_secret_value())
    if principal is None:
        raise HTTPException(401, "missing, unknown or revoked bearer token", headers={"WWW-Authenticate": "Bearer"})
    return {"name": principal.name, "scopes": sorted(principal.scopes)}
