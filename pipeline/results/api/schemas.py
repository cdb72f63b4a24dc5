"""Request and response models of the JSON API (one model per document; OpenAPI comes from them)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from pipeline.results.auth import Scope


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


class TokenOut(BaseModel):
    name: str
    scopes: list[str]
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


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
