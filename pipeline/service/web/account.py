"""Sign-in (a password, or an API token holding the user scope) and sign-out."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from pipeline.service import users
from pipeline.service.api.deps import SessionDep, SettingsDep
from pipeline.service.web.render import page
from pipeline.service.web.session import (
    UserDep,
    checked_form,
    form_model,
    safe_next,
    sign_in,
    sign_out,
)

router = APIRouter(include_in_schema=False)


class SignIn(BaseModel):
    """The sign-in form: a password user's name and password, at the limits `POST /api/v1/users`
    creates them with, or an API token."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("", max_length=users.MAX_NAME)
    password: str = Field("", max_length=users.MAX_PASSWORD)
    token: str = Field("", max_length=1000)   # ours have 50 characters; the bootstrap token is as set


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, user: UserDep, next: str = "/", reason: str = "") -> HTMLResponse:
    return page(request, "login.html", user, {"next": safe_next(next), "reason": reason, "error": None})


@router.post("/login")
async def login(request: Request, session: SessionDep, settings: SettingsDep, user: UserDep) -> Response:
    form = await checked_form(request)
    back = safe_next(form.get("next", "/"))
    asked = form_model(SignIn, {"name": form.get("name", "").strip(), "password": form.get("password", ""),
                                "token": form.get("token", "").strip()})
    # off the event loop: a password hash is CPU work, and a sign-in by token writes (its last use), which on
    # SQLite may wait for a request whose commit itself needs the loop
    principal = await run_in_threadpool(sign_in, request, session, settings, name=asked.name,
                                        password=asked.password, token=asked.token)
    if principal is None:
        return page(request, "login.html", user, {
            "next": back, "reason": "", "error": "wrong name or password, or a token that is unknown, revoked or "
                                                 "without the user scope"}, status_code=401)
    request.session["flash"] = {"kind": "ok", "text": f"signed in as {principal.name}"}
    return RedirectResponse(back, status_code=303)


@router.post("/logout")
async def logout(request: Request) -> RedirectResponse:
    await checked_form(request)
    sign_out(request)
    return RedirectResponse("/", status_code=303)
