"""The service: JSON API under /api/v1 and the plain pages, one FastAPI app."""

from __future__ import annotations

import gc
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from pipeline import __version__
from pipeline.config import Settings
from pipeline.contracts import ContractError
from pipeline.contracts.text import find_bad_text
from pipeline.service import web
from pipeline.service.api.routes import (
    agents,
    bisections,
    bundles,
    change_points,
    commits,
    compare,
    compile_stats,
    dashboard,
    health,
    imports,
    jobs,
    regressions,
    results,
    runs,
    series,
    tokens,
    users,
    webhooks,
)
from pipeline.service.api.schemas import add_body_schemas, document_errors
from pipeline.service.auth import AuthError
from pipeline.service.web.render import error_page, wants_html
from pipeline.results.store.db import UNAVAILABLE, Engine, StoreError
from pipeline.results.store.ingest import IngestError
from pipeline.results.store.triage import TriageError

__all__ = ["Lifespan", "create_app", "freeze_startup_heap"]

log = logging.getLogger(__name__)


def freeze_startup_heap() -> None:
    """Collect once, then keep what start-up left alive (modules, the app, the ORM's registries:
    ~200,000 objects) out of later garbage collections (`gc.freeze`). Without it each full
    collection walks them all: ~90 ms pauses inside requests that allocate a lot (a 20,000-series
    dashboard, a large comparison). Call it once, just before serving."""
    gc.collect()
    gc.freeze()


Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def create_app(settings: Settings, engine: Engine, *, lifespan: Lifespan | None = None) -> FastAPI:
    """The app over `engine`; `lifespan` runs beside it while it is served (the service's loops:
    `pipeline.service.runtime.lifespan`; None: none, as the tests' apps)."""
    # docs_url/redoc_url None: FastAPI's own pages load Swagger UI and ReDoc from a CDN, blank offline;
    # /docs is served below with the vendored Swagger UI (web/static/vendor/swagger-ui).
    app = FastAPI(title="benchfarm", version=__version__, docs_url=None, redoc_url=None, lifespan=lifespan,
                  description="Continuous benchmarking for GPU and mobile kernels: results, series, change points, "
                              "comparisons and their triage.")

    @app.get("/docs", include_in_schema=False)
    def api_docs() -> HTMLResponse:
        vendor = "/static/vendor/swagger-ui"
        return get_swagger_ui_html(openapi_url=app.openapi_url or "/openapi.json", title="benchfarm API",
                                   swagger_js_url=f"{vendor}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{vendor}/swagger-ui.css",
                                   swagger_favicon_url=f"{vendor}/favicon-32x32.png")
    app.state.settings = settings
    app.state.engine = engine

    @app.middleware("http")
    async def screen_request(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > settings.max_upload_bytes):
            # Refused from the header alone: not one byte of the body is read.
            return JSONResponse({"error": f"request body over {settings.max_upload_bytes} bytes "
                                          "(BENCHFARM_MAX_UPLOAD_BYTES)"}, status_code=413)
        address = [request.scope["path"], *(text for item in request.query_params.multi_items() for text in item)]
        if (bad := find_bad_text(address)) is not None:
            # the one rule for text (contracts.text): bodies are screened by strict_json, forms by checked_form,
            # the address here (a NUL, %00, would be a driver error on PostgreSQL, an empty answer on SQLite)
            message = f"the address: {bad[1]} (%00 is NUL): no name, id or parameter has one"
            if wants_html(request):
                return error_page(request, 422, message)
            return JSONResponse({"error": message}, status_code=422)
        return await call_next(request)

    @app.exception_handler(ContractError)
    async def contract_error(request: Request, exc: ContractError) -> JSONResponse:
        return JSONResponse({"error": str(exc),
                             "errors": [{"field": f, "reason": r} for f, r in exc.errors]}, status_code=422)

    @app.exception_handler(IngestError)
    async def ingest_error(request: Request, exc: IngestError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=422)

    @app.exception_handler(TriageError)
    async def triage_error(request: Request, exc: TriageError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=422)

    @app.exception_handler(AuthError)
    async def auth_error(request: Request, exc: AuthError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=422)

    async def store_unavailable(request: Request, exc: StoreError) -> Response:
        """The store did not answer (PostgreSQL restarting, a connection cut, SQLite locked) or gave up
        (a deadlock): a 503 with Retry-After, not a 500, so that the client sends the request again. The
        agents wait a 503 out as an unreachable service (`agents.client`); their writes are idempotent."""
        said = str(exc.orig or exc).strip()
        reason = said.splitlines()[0][:300] if said else type(exc).__name__
        log.warning("store unavailable: %s %s: %s", request.method, request.url.path, reason)
        message = f"the store is not available ({reason}): send the request again shortly"
        headers = {"Retry-After": "2"}
        if wants_html(request):
            return error_page(request, 503, message, headers=headers)
        return JSONResponse({"error": message}, status_code=503, headers=headers)

    for unavailable in UNAVAILABLE:
        app.exception_handler(unavailable)(store_unavailable)

    # Pages get their errors as pages with the navigation (web.render.error_page), the API as JSON.
    @app.exception_handler(RequestValidationError)
    async def request_error(request: Request, exc: RequestValidationError) -> Response:
        errors = [{"field": ".".join(str(p) for p in e["loc"]), "reason": e["msg"]} for e in exc.errors()]
        if wants_html(request):
            shown = [{"field": e["field"].removeprefix("query.").removeprefix("path.").removeprefix("form."),
                      "reason": e["reason"]} for e in errors]
            form = any(e["field"].startswith("form.") for e in errors)
            return error_page(request, 422, "the form has a value that cannot be taken" if form
                              else "the address has a value this page cannot use", shown)
        return JSONResponse({"error": "invalid request", "errors": errors}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if wants_html(request):
            return error_page(request, exc.status_code, str(exc.detail), headers=exc.headers)
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    for module in (health, commits, runs, compare, series, compile_stats, change_points, regressions, dashboard,
                   results, imports, tokens, agents, jobs, bundles, webhooks, bisections, users):
        app.include_router(module.router, prefix="/api/v1")
    web.mount(app)

    default_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_errors(add_body_schemas(default_openapi()))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend its schema
    return app
