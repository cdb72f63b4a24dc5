"""Request dependencies: the one session dependency and the one write guard."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from sqlalchemy.orm import Session

from pipeline.config import Settings
from pipeline.results.db import session_scope


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_session(request: Request) -> Iterator[Session]:
    with session_scope(request.app.state.engine) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]


def require_writer(request: Request, settings: SettingsDep) -> None:
    """Writes need `Authorization: Bearer <BENCHFARM_API_TOKEN>`; without a configured token they are off."""
    expected = settings.api_token.get_secret_value()
    if not expected:
        raise HTTPException(403, "API writes are disabled: set BENCHFARM_API_TOKEN on the service")
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), expected.encode()):
        raise HTTPException(401, "missing or wrong bearer token")


WriterDep = Depends(require_writer)
