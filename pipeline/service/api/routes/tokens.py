"""API tokens (admin scope): create (the token is in the answer, once), list, revoke."""

from __future__ import annotations

from fastapi import APIRouter

from pipeline.service import auth
from pipeline.service.api.deps import SessionDep, require_scope
from pipeline.service.api.schemas import (
    ERROR_RESPONSES,
    TokenCreate,
    TokenCreated,
)
from pipeline.results.store.accounts import TokenOut
from pipeline.service.api.strict_route import StrictJsonRoute

router = APIRouter(route_class=StrictJsonRoute, tags=["tokens"], dependencies=[require_scope("admin")], responses=ERROR_RESPONSES)


@router.get("/tokens", response_model=list[TokenOut], summary="List tokens (never the tokens themselves)")
def list_tokens(session: SessionDep) -> list[TokenOut]:
    return auth.list_tokens(session)


@router.post("/tokens", response_model=TokenCreated, status_code=201,
             summary="Create a token; the answer holds the token, which cannot be shown again")
def create_token(request: TokenCreate, session: SessionDep) -> TokenCreated:
    token = auth.create_token(session, name=request.name, scopes=request.scopes)
    (info,) = [t for t in auth.list_tokens(session) if t.name == request.name]
    return TokenCreated(token=token, **dict(info))


@router.delete("/tokens/{name}", response_model=TokenOut, summary="Revoke a token (its name stays taken)")
def revoke_token(name: str, session: SessionDep) -> TokenOut:
    return auth.revoke_token(session, name=name)
