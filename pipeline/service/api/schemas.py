"""Request models of the JSON API, and the answers that exist only in it (a created token, upload
summaries, errors). The documents it serves from the store and the service (commits, comparisons,
series, change points, tokens, users...) are those modules' own models, each the response_model of
its routes as it is: one model per document, and OpenAPI comes from them."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from pipeline.service.auth import Scope
from pipeline.results.store.accounts import TokenOut
from pipeline.results.store.states import TRIAGE_STATES


class FieldError(BaseModel):
    field: str = Field(description="dotted path of the field at fault, e.g. `3.results.0.samples.9`")
    reason: str


class ErrorBody(BaseModel):
    """Every 4xx of the API: a message naming the problem, and per-field reasons where there are some."""

    error: str
    errors: list[FieldError] = Field(default_factory=list)


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing, unknown or revoked bearer token"},
    403: {"model": ErrorBody, "description": "the token lacks the scope, or API writes are disabled"},
    413: {"model": ErrorBody, "description": "request body over BENCHFARM_MAX_UPLOAD_BYTES"},
    422: {"model": ErrorBody, "description": "a document that does not validate or the store cannot take; "
                                            "nothing was written"},
}
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorBody, "description": "the job is not the caller's to write now (ended, or leased to another "
                                            "agent), or a device class only an admin may redefine"},
}


class UploadSummary(BaseModel):
    job_id: str
    stored: int = Field(description="case results written by this request")
    duplicates: int = Field(description="case results already stored for their (job, case, target): skipped")
    samples: int = Field(0, description="samples written by this request")


class BatchSummary(BaseModel):
    documents: list[UploadSummary] = Field(description="one entry per document, in request order")
    stored: int
    duplicates: int
    samples: int


class ImportSummary(UploadSummary):
    run_id: str
    format: str
    cases: dict[str, str] = Field(description="benchmark name in the file -> case id it was stored under")


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    scopes: list[Scope] = Field(min_length=1)


class TokenCreated(TokenOut):
    token: str = Field(description="the token itself: shown once, stored only as its sha256")


def json_body(annotation: Any, description: str) -> dict[str, Any]:
    """`openapi_extra` documenting a JSON request body that the route reads itself (to bound its
    size while streaming it, and to validate it through `pipeline.contracts`). The schemas it
    refers to are added to the document's components by `add_body_schemas`."""
    adapter = TypeAdapter(annotation)
    schema = adapter.json_schema(ref_template="#/components/schemas/{model}")
    defs = schema.pop("$defs", {})
    _BODY_DEFS.update(defs)
    return {"requestBody": {"required": True, "description": description,
                            "content": {"application/json": {"schema": schema}}}}


_BODY_DEFS: dict[str, Any] = {}


def add_body_schemas(openapi: dict[str, Any]) -> dict[str, Any]:
    components = openapi.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in _BODY_DEFS.items():
        components.setdefault(name, schema)
    return openapi


def document_errors(openapi: dict[str, Any]) -> dict[str, Any]:
    """Every operation's error answers, from what it takes, each an `ErrorBody`: 401 and 403 where
    its security names a scope, 404 where its path names something, 413 and 422 where it takes a
    body, 422 where it takes parameters (FastAPI documents those 422s with its own validation
    model; the service's handler answers an ErrorBody, so that is what the document says); 503
    everywhere (the store is away: `app.store_unavailable`)."""
    error_schema = {"$ref": "#/components/schemas/ErrorBody"}
    components = openapi.setdefault("components", {}).setdefault("schemas", {})
    body = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, schema in {**body.pop("$defs", {}), "ErrorBody": body}.items():
        components.setdefault(name, schema)
    for operations in openapi.get("paths", {}).values():
        for operation in operations.values():
            parameters = operation.get("parameters", [])
            wanted: dict[int, str] = {}
            if operation.get("security"):
                wanted |= {401: ERROR_RESPONSES[401]["description"], 403: ERROR_RESPONSES[403]["description"]}
            if any(p.get("in") == "path" for p in parameters):
                wanted[404] = "nothing of that name or id"
            if "requestBody" in operation:
                wanted |= {413: ERROR_RESPONSES[413]["description"], 422: ERROR_RESPONSES[422]["description"]}
            if parameters:
                wanted.setdefault(422, "a parameter that does not validate")
            wanted[503] = "the store is not available (restarting, unreachable): send the request again (Retry-After)"
            responses = operation.setdefault("responses", {})
            for code, description in wanted.items():
                responses.setdefault(str(code), {"description": description})
            for code, response in responses.items():
                if code.startswith("4") or code == "503":
                    response["content"] = {"application/json": {"schema": error_schema}}
    return openapi


# --- read side: the documents are the store's models (`queries`, `compare`, `compile_stats`,
# `triage`), used as the routes' response_model as they are; here only what the API reads.


TriageState = Literal["needs triage", "noisy", "confirmed", "intended", "assigned", "fixed"]
if set(get_args(TriageState)) != set(TRIAGE_STATES):
    raise RuntimeError("schemas.TriageState differs from states.TRIAGE_STATES")


class SeriesSettingsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    min_magnitude: float | None = Field(None, ge=0, lt=1, description="None: back to the default")
    lower_is_better: bool | None = Field(None, description="None: the metric's direction")


class TriageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state: TriageState
    bug_link: str | None = Field(None, max_length=1000, description="required for confirmed")
    assignee: str | None = Field(None, max_length=200, description="required for assigned")
    note: str = Field("", max_length=10_000)
