"""Password users of the web UI (admin scope): create, list, disable."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from pipeline.service import users
from pipeline.service.api.deps import SessionDep, require_scope
from pipeline.service.api.schemas import ERROR_RESPONSES
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.results.store.accounts import UserOut

router = APIRouter(route_class=StrictJsonRoute, tags=["users"], dependencies=[require_scope("admin")],
                   responses=ERROR_RESPONSES)


class UserCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=users.MAX_NAME, description="1-100 letters, digits, '.', '_', '@' or '-'")
    password: str = Field(min_length=users.MIN_PASSWORD, max_length=users.MAX_PASSWORD,
                          description="stored as a scrypt hash, never as given")
    scopes: list[str] = Field(default_factory=lambda: ["user"], description="user and/or admin")


@router.get("/users", response_model=list[UserOut], summary="List the web UI's password users")
def list_users(session: SessionDep) -> list[UserOut]:
    return users.list_users(session)


@router.post("/users", response_model=UserOut, status_code=201, summary="Create a password user of the web UI")
def create_user(request: UserCreate, session: SessionDep) -> UserOut:
    return users.create_user(session, name=request.name, password=request.password, scopes=request.scopes)


@router.delete("/users/{name}", response_model=UserOut, summary="Disable a user (signed out at once; the name stays taken)")
def disable_user(name: str, session: SessionDep) -> UserOut:
    return users.disable_user(session, name=name)
