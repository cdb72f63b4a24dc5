"""Who is browsing: signed session cookies, sign-in by password or token, CSRF, the browse guard.

The session is a small JSON object in a cookie signed with HMAC-SHA256 (`WebSettings.secret_key`,
or a random key per process) and stamped with its issue time; a cookie that is tampered with,
signed by another key or older than `WebSettings.session_hours` is an empty session. It holds
who signed in and how, never a password or a token:
- `via: "password"`: `user` names a row of `users`, looked up again on every request, so a
  disabled user is signed out at once;
- `via: "token"`: `token_hash` is the sha256 of the API token used, looked up again on every
  request, so a revoked token signs its sessions out; the bootstrap token (BENCHFARM_API_TOKEN)
  is kept as its hash and compared with the setting's.
A principal needs the `user` scope (or `admin`) to sign in: agent tokens cannot.

CSRF: a random token per session (`csrf`), put in every form by the templates and compared in
constant time on every form post (`checked_form`); the cookie is SameSite=Lax and HttpOnly too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import Depends, Request
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeline.service import auth, users
from pipeline.service.api.deps import (
    SessionDep,
    SettingsDep,
    bearer_token,
    principal_of,
)
from pipeline.service.auth import Principal

__all__ = ["COOKIE", "CsrfError", "SignInRequired", "SignedSessionMiddleware", "UserDep", "browse_guard",
           "checked_form", "csrf_token", "current_user", "safe_next", "sign_in", "sign_out"]

COOKIE = "benchfarm_session"


class SignInRequired(Exception):
    """The page needs a signed-in user; answered with a redirect to the sign-in page."""

    def __init__(self, next_path: str, reason: str = "") -> None:
        super().__init__(reason)
        self.next_path = next_path
        self.reason = reason


class CsrfError(Exception):
    """A form post without the session's CSRF token."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SignedSessionMiddleware:
    """`request.session` from a signed cookie (Starlette's SessionMiddleware, without itsdangerous)."""

    def __init__(self, app: ASGIApp, *, secret_key: bytes, max_age_s: int, https_only: bool) -> None:
        self.app = app
        self.key = secret_key
        self.max_age_s = max_age_s
        self.https_only = https_only

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self.key, payload.encode(), hashlib.sha256).digest())

    def load(self, cookie: str) -> dict[str, Any]:
        try:
            payload, stamp, signature = cookie.split(".")
            if not hmac.compare_digest(signature, self._sign(f"{payload}.{stamp}")):
                return {}
            if time.time() - int(stamp) > self.max_age_s:
                return {}
            data = json.loads(_unb64(payload))
        except (ValueError, json.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    def dump(self, data: dict[str, Any]) -> str:
        payload = _b64(json.dumps(data, separators=(",", ":")).encode())
        stamp = str(int(time.time()))
        return f"{payload}.{stamp}.{self._sign(f'{payload}.{stamp}')}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cookie = ""
        for name, value in scope["headers"]:
            if name == b"cookie":
                for part in value.decode("latin-1").split(";"):
                    key, _, val = part.strip().partition("=")
                    if key == COOKIE:
                        cookie = val
        initial = self.load(cookie) if cookie else {}
        scope["session"] = dict(initial)

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                current = scope["session"]
                flags = f"; Path=/; HttpOnly; SameSite=Lax{'; Secure' if self.https_only else ''}"
                headers = MutableHeaders(scope=message)
                if current and current != initial:
                    headers.append("set-cookie", f"{COOKIE}={self.dump(current)}; Max-Age={self.max_age_s}{flags}")
                elif not current and cookie:
                    headers.append("set-cookie", f"{COOKIE}=; Max-Age=0{flags}")
            await send(message)

        await self.app(scope, receive, send_with_cookie)


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
    """The url-encoded form of a post, refused (CsrfError) without the session's CSRF token."""
    body = (await request.body()).decode("utf-8", errors="replace")
    form = {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}
    expected = request.session.get("csrf")
    if not expected or not hmac.compare_digest(str(expected), form.get("csrf", "")):
        raise CsrfError("the form's CSRF token is missing or stale: reload the page and try again")
    return form


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
