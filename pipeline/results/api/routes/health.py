"""GET /health: liveness, version and which store is behind the service."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

from pipeline import __version__
from pipeline.results.api.deps import SessionDep

router = APIRouter(tags=["health"])


@router.get("/health")
def health(session: SessionDep) -> dict[str, str]:
    session.execute(text("SELECT 1"))
    return {"status": "ok", "version": __version__, "database": session.get_bind().dialect.name}
