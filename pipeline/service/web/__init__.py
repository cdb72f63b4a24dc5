"""The history web UI, served by the service's own app: Jinja2 pages (autoescaped), uPlot vendored
under /static (no CDN), signed-cookie sessions and CSRF-checked forms.

`mount(app)` is all the service calls. Pages: / (dashboard), /series/{id}, /compare, /regressions,
/roofline, /runs/{id}, /devices, /jobs, /jobs/{id}, /runs/new (the ad-hoc run form), /login. With
`web.public` false, pages and the JSON API's reads need a signed-in user or a bearer token with the
user scope (health and the API's schema stay open).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
)
from fastapi.staticfiles import StaticFiles
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint

from pipeline.service.api.deps import Principal, principal_of
from pipeline.service.web.session import (
    CsrfError,
    SignInRequired,
    bearer_principal,
    install_sessions,
)
from pipeline.results.store.db import session_scope

__all__ = ["mount"]

STATIC = Path(__file__).parent / "static"
OPEN_API_PATHS = ("/api/v1/health",)


def mount(app: FastAPI) -> None:
    from pipeline.service.web import account, farm, pages, review

    settings = app.state.settings
    web = settings.web

    if not web.public:
        def reader(request: Request) -> Principal | None:
            with session_scope(app.state.engine) as session:
                return bearer_principal(request, session, settings) or principal_of(request, session, settings)

        async def private_reads(request: Request, call_next: RequestResponseEndpoint) -> Response:
            if request.url.path.startswith("/api/") and request.method in ("GET", "HEAD") \
                    and request.url.path not in OPEN_API_PATHS:
                who = await run_in_threadpool(reader, request)   # off the event loop: a token's use is written
                if who is None or not who.allows("user"):
                    return JSONResponse({"error": "this benchfarm is private: a bearer token with the user scope "
                                                  "(or a signed-in session) is needed to read"}, status_code=401,
                                        headers={"WWW-Authenticate": "Bearer"})
            return await call_next(request)

        app.add_middleware(BaseHTTPMiddleware, dispatch=private_reads)

    install_sessions(app, settings)  # added last: outermost, so private_reads sees the session

    @app.exception_handler(SignInRequired)
    async def sign_in_required(request: Request, exc: SignInRequired) -> RedirectResponse:
        target = f"/login?next={quote(exc.next_path, safe='/')}&reason={quote(exc.reason)}"
        return RedirectResponse(target, status_code=303)

    @app.exception_handler(CsrfError)
    async def csrf_error(request: Request, exc: CsrfError) -> HTMLResponse:
        from markupsafe import escape

        return HTMLResponse(f"<!doctype html><title>refused</title><p>{escape(str(exc))}</p>"
                            '<p><a href="/">benchfarm</a></p>', status_code=403)

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:
        """The pages name /static/favicon.svg; this is for what asks the old address anyway."""
        return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for module in (account, farm, pages, review):  # farm's /runs/new before /runs/{run_id}
        app.include_router(module.router)
