"""Request dependencies: the one session dependency, the settings, who is signed in (`principal_of`:
the web UI's session cookie, which `web.session` signs), and the one guard factory.

`require_scope("agent")` is the only authentication in the service: a route lists it in its
`dependencies` (or takes its Principal as a parameter). The guard shares the request's session,
so recording a token's use commits or rolls back with the request's own work.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Path, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from pipeline.config import Settings
from pipeline.contracts.limits import INT32_MAX
from pipeline.service import auth, users
from pipeline.service.auth import SCOPES, Principal, Scope
from pipeline.results.store import accounts
from pipeline.results.store.db import Session, session_scope

__all__ = ["MAX_ROW_ID", "BodyDep", "Principal", "RowId", "SessionDep", "SettingsDep", "principal_of", "require_scope"]


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_session(request: Request) -> Iterator[Session]:
    with session_scope(request.app.state.engine) as session:
        yield session


# scope="function": the transaction commits before the response is sent, so a client that reads
# right after a write sees it (the default, "request", would commit after the response).
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
SettingsDep = Annotated[Settings, Depends(get_settings)]
MAX_ROW_ID = INT32_MAX
"""The largest id a row named in a request can have: the id columns are PostgreSQL `integer` (SQLite's
take 64 bits; the bound is the smaller, so that both stores answer alike)."""
RowId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description=f"a stored row's id (1 to {MAX_ROW_ID})")]
"""An integer id in a path: out of a database integer's range it is a 422, not a 500 from the driver."""


async def read_bounded_body(request: Request, settings: SettingsDep) -> bytes:
    """The request body, refused with 413 as soon as more than BENCHFARM_MAX_UPLOAD_BYTES have
    arrived (the middleware refuses a too large Content-Length before reading anything; this
    covers chunked bodies, which announce no length)."""
    limit = settings.max_upload_bytes
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"request body over {limit} bytes (BENCHFARM_MAX_UPLOAD_BYTES)")
        chunks.append(chunk)
    return b"".join(chunks)


BodyDep = Annotated[bytes, Depends(read_bounded_body)]

WRITES_DISABLED = (
    "API writes are disabled: set BENCHFARM_API_TOKEN on the service, or create a token with "
    "`benchfarm token create --name NAME --scope agent`"
)


def bearer_token(request: Request) -> str:
    """The request's bearer token ('' without one)."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return given.strip() if scheme.lower() == "bearer" else ""


CSRF_HEADER = "x-csrf-token"

BEARER = HTTPBearer(auto_error=False, scheme_name="token", description=(
    "a benchfarm token (`benchfarm token create`); each operation's security lists the scope it needs: "
    "agent, user or admin (admin holds them all)"))
"""Declares the bearer scheme in the OpenAPI document (the guard reads the header itself)."""


def _bootstrap_hash(settings: SettingsDep) -> str:
    bootstrap = settings.api_token.get_secret_value()
    return auth.hash_token(bootstrap) if bootstrap else ""


def principal_of(request: Request, session: SessionDep, settings: SettingsDep) -> Principal | None:
    """The signed-in principal of the request's session, checked against the store now."""
    data = request.session
    via = data.get("via")
    if via == "password":
        return users.active_principal(session, str(data.get("user", "")))
    if via == "bootstrap":
        expected = _bootstrap_hash(settings)
        if expected and hmac.compare_digest(expected, str(data.get("token_hash", ""))):
            return Principal(name=auth.BOOTSTRAP_NAME, scopes=frozenset(auth.SCOPES))
        return None
    if via == "token":
        stored = accounts.find_token(session, str(data.get("token_hash", "")))
        if stored is None or stored.token.revoked_at is not None:
            return None
        return Principal(name=stored.token.name, scopes=frozenset(stored.token.scopes))
    return None


def _page_principal(request: Request, session: Session, settings: Settings) -> Principal | None:
    """The signed-in user of the web UI's session cookie, for a script of its own pages: only with the
    session's CSRF token in the X-CSRF-Token header (another site's page can send the cookie, never
    the header's value)."""
    data = request.scope.get("session") or {}
    given, expected = request.headers.get(CSRF_HEADER, ""), str(data.get("csrf", ""))
    if not given or not expected or not hmac.compare_digest(given, expected):
        return None
    return principal_of(request, session, settings)


def require_scope(scope: Scope) -> Any:
    """A dependency admitting requests whose bearer token holds `scope` (admin holds them all), or
    without a bearer token, the web UI's signed-in user sending its session's CSRF token in the
    X-CSRF-Token header (the ad-hoc run form posts to the API as the CLI does).

    401: no token, or one that is unknown or revoked; 403: a valid token without the scope, or
    no token configured at all (neither BENCHFARM_API_TOKEN nor a stored one: writes are off).
    """
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; known: {', '.join(SCOPES)}")

    def guard(request: Request, session: SessionDep, settings: SettingsDep,
              _: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]) -> Principal:
        bootstrap = settings.api_token.get_secret_value()
        principal = auth.authenticate(session, token=bearer_token(request), bootstrap=bootstrap)
        if principal is None and not bearer_token(request):
            principal = _page_principal(request, session, settings)
        if principal is None:
            if not bootstrap and not auth.has_active_tokens(session):
                raise HTTPException(403, WRITES_DISABLED)
            raise HTTPException(401, "missing, unknown or revoked bearer token",
                                headers={"WWW-Authenticate": "Bearer"})
        if not principal.allows(scope):
            held = ", ".join(sorted(principal.scopes))
            raise HTTPException(403, f"token {principal.name!r} lacks the {scope} scope (it holds: {held})")
        return principal

    guard.__name__ = f"require_{scope}_scope"
    # Security: the operation's OpenAPI security then names the scheme and this scope
    return Security(guard, scopes=[scope])
