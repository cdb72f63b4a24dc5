"""Who is browsing: signed session cookies, sign-in by password or token, CSRF, the browse guard, and
form fields checked as the API's bodies are.

What the cookie holds, how long it lasts and why: docs/design.md, "Web sessions".
"""

from __future__ import annotations

import hmac
import secrets
from typing import Annotated, Any, TypeVar
from urllib.parse import parse_qs, quote

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.middleware.sessions import SessionMiddleware

from pipeline.config import Settings
from pipeline.contracts.text import find_bad_text
from pipeline.service import auth, users
from pipeline.service.api.deps import (
    SessionDep,
    SettingsDep,
    bearer_token,
    principal_of,
)
from pipeline.service.auth import Principal

__all__ = ["COOKIE", "CsrfError", "SignInRequired", "UserDep", "browse_guard", "checked_form", "csrf_token",
           "current_user", "form_model", "install_sessions", "safe_next", "sign_in", "sign_out"]

COOKIE = "benchfarm_session"
M = TypeVar("M", bound=BaseModel)


class SignInRequired(Exception):
    """The page needs a signed-in user; answered with a redirect to the sign-in page."""

    def __init__(self, next_path: str, reason: str = "") -> None:
        super().__init__(reason)
        self.next_path = next_path
        self.reason = reason


class CsrfError(Exception):
    """A form post without the session's CSRF token."""


def install_sessions(app: FastAPI, settings: Settings) -> None:
    """`request.session` from the signed cookie: Starlette's SessionMiddleware with our cookie's
    name, lifetime and flags."""
    web = settings.web
    app.add_middleware(
        SessionMiddleware,
        secret_key=web.secret_key.get_secret_value() or secrets.token_urlsafe(32),
        session_cookie=COOKIE,
        max_age=max(1, round(web.session_hours * 3600)),
        same_site="lax",
        https_only=settings.public_url.startswith("https://"),  # Secure: a browser on http would drop it
    )


def current_user(request: Request, session: SessionDep, settings: SettingsDep) -> Principal | None:
    principal = principal_of(request, session, settings)
    if principal is None and request.session.get("via"):
        request.session.clear()  # the user was disabled or the token revoked: signed out
    return principal


UserDep = Annotated[Principal | None, Depends(current_user)]


def browse_guard(request: Request, user: UserDep, settings: SettingsDep) -> None:
    """Pages are public unless `web.public` is false; then they need a signed-in user."""
    if not settings.web.public and user is None:
        raise SignInRequired(request.url.path + (f"?{request.url.query}" if request.url.query else ""),
                             "this benchfarm is private: sign in to browse")


def require_signed_in(request: Request, user: UserDep, what: str) -> Principal:
    if user is None or not user.allows("user"):
        raise SignInRequired(safe_next(request.headers.get("referer", "/"), request), f"sign in to {what}")
    return user


def sign_in(request: Request, session: SessionDep, settings: SettingsDep, *, name: str, password: str,
            token: str) -> Principal | None:
    """Sign in with a name and password, or with an API token (that holds the user scope)."""
    if token:
        principal = auth.authenticate(session, token=token, bootstrap=settings.api_token.get_secret_value())
        if principal is None or not principal.allows("user"):
            return None
        via = "bootstrap" if principal.name == auth.BOOTSTRAP_NAME else "token"
        identity = {"via": via, "token_hash": auth.hash_token(token)}
    else:
        principal = users.check_password(session, name=name, password=password)
        if principal is None:
            return None
        identity = {"via": "password", "user": principal.name}
    request.session.clear()  # a fresh session (and CSRF token) at every sign-in: no fixation
    request.session.update(identity, csrf=secrets.token_urlsafe(32), name=principal.name)
    return principal


def sign_out(request: Request) -> None:
    request.session.clear()


def csrf_token(request: Request) -> str:
    token = request.session.get("csrf")
    if not token:
        token = request.session["csrf"] = secrets.token_urlsafe(32)
    return str(token)


async def checked_form(request: Request) -> dict[str, str]:
    """The url-encoded form of a post, refused (CsrfError) without the session's CSRF token, and
    (a 422 naming the field) when a field's text may not be stored."""
    body = (await request.body()).decode("utf-8", errors="replace")
    form = {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}
    expected = request.session.get("csrf")
    if not expected or not hmac.compare_digest(str(expected), form.get("csrf", "")):
        raise CsrfError("the form's CSRF token is missing or stale: reload the page and try again")
    if (bad := find_bad_text(form)) is not None:
        raise RequestValidationError([{"type": "value_error", "loc": ("form", bad[0]), "msg": bad[1]}])
    return form


def form_model(model: type[M], fields: dict[str, Any]) -> M:
    """A form's fields through `model`, the API's request model of the same action: a 422 naming
    each field that does not validate."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        raise RequestValidationError([{"type": e["type"], "loc": ("form", *e["loc"]), "msg": e["msg"]}
                                      for e in exc.errors(include_url=False)]) from None


def safe_next(target: str, request: Request | None = None) -> str:
    """A local path to go back to: an absolute URL on this host becomes its path; anything else, '/'."""
    if request is not None:
        base = str(request.base_url)
        if target.startswith(base):
            target = "/" + target[len(base):]
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def login_url(next_path: str) -> str:
    return "/login?next=" + quote(safe_next(next_path), safe="/")


def bearer_principal(request: Request, session: SessionDep, settings: SettingsDep) -> Principal | None:
    return auth.authenticate(session, token=bearer_token(request), bootstrap=settings.api_token.get_secret_value())
