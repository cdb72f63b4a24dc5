"""Request and response models of the JSON API (one model per document; OpenAPI comes from them)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from pipeline.contracts.ids import CaseId, CaseIdAsText
from pipeline.service.auth import Scope
from pipeline.store.bisect_views import BisectionView
from pipeline.store.models import LIFECYCLE, TRIAGE_STATES


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


def document_errors(openapi: dict[str, Any]) -> dict[str, Any]:
    """Every operation's error answers, from what it takes, each an `ErrorBody`: 401 and 403 where
    its security names a scope, 404 where its path names something, 413 and 422 where it takes a
    body, 422 where it takes parameters (FastAPI documents those 422s with its own validation
    model; the service's handler answers an ErrorBody, so that is what the document says)."""
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
            responses = operation.setdefault("responses", {})
            for code, description in wanted.items():
                responses.setdefault(str(code), {"description": description})
            for code, response in responses.items():
                if code.startswith("4"):
                    response["content"] = {"application/json": {"schema": error_schema}}
    return openapi


# --- read side: commits, comparisons, series, change points, dashboard ---------------------------
# Built from the plain dataclasses of `queries`, `compare` and `triage` (from_attributes): the
# dataclass is the one source of the fields, these models only describe them for OpenAPI.


class _FromAttributes(BaseModel):
    model_config = ConfigDict(from_attributes=True)


def as_answer(row: Any) -> dict[str, Any]:
    """A store dataclass as an answer with no model of its own (`dataclasses.asdict`), its case ids
    as their text: the API carries a case id's text, never its parts."""
    return asdict(row, dict_factory=lambda items: {k: str(v) if isinstance(v, CaseId) else v for k, v in items})


class CommitOut(_FromAttributes):
    repository: str
    sha: str
    message: str
    author: str
    committed_at: datetime
    branch: str | None
    pull_request: int | None
    parents: list[str] = Field(description="parent shas, first parent first")


class RunOut(_FromAttributes):
    id: str
    repository: str
    commit_sha: str
    kind: str
    status: str
    created_at: datetime
    finished_at: datetime | None
    job_count: int


class CommitDetailOut(CommitOut):
    on_default_branch: bool = Field(description="on the first-parent chain of the default-branch head")
    runs: list[RunOut]


class ComparisonRowOut(_FromAttributes):
    case_id: CaseIdAsText
    target: str
    model: str
    base_median: float | None = Field(description="seconds; with paired samples, the median of the paired base samples")
    head_median: float | None
    change: float | None = Field(description="relative change from the timing rounds: paired, exp(mean of the rounds' "
                                 "median log(head/base)) - 1; unpaired, exp(mean log round median, head - base) - 1")
    ci_low: float | None = Field(description="lower end of the change's 95 % interval (t over the rounds)")
    ci_high: float | None = Field(description="upper end of the change's 95 % interval")
    pvalue: float | None = Field(description="two-sided p-value of no change: a t-test over the rounds (paired) or "
                                 "Welch's over both sides' rounds")
    threshold: float | None = Field(description="smallest |change| counted for this case: the minimum change, or "
                                    "noise_factor x its measured noise on the device class when larger")
    status: str = Field(description="regressed | improved | similar | unchanged (identical binaries: never a change) "
                                    "| insufficient data | errored | no baseline")
    paired: bool = Field(description="decided by the paired test (base and head interleaved in one job)")
    same_binary: bool = Field(description="head and base timed identical binaries (equal binary digests)")
    is_control: bool = Field(description="a vendor implementation, the control of suite cases of its shape")
    control_case: CaseIdAsText | None
    control_change: float | None
    control_pvalue: float | None
    drift: bool = Field(description="probable device drift: the vendor control moved as much; not in the verdict")


class ComparisonOut(_FromAttributes):
    repository: str
    head_sha: str
    base_sha: str | None
    device_class: str
    merge_base: str | None
    base_source: str = Field(description="explicit | paired | merge base | first parent | none")
    verdict: str
    errored: int
    drift: int
    paired: bool
    counts: dict[str, int]
    rows: list[ComparisonRowOut]


class CompileChangeOut(_FromAttributes):
    case_id: CaseIdAsText
    target: str
    metric: str
    base: float | None
    head: float | None
    change: float | None = Field(description="head / base - 1; None when a side is missing or base is 0")


class CompileComparisonOut(_FromAttributes):
    """The compile figures of the head against a base: beside the latency verdict, never part of it."""

    head_sha: str
    base_sha: str | None
    base_source: str = Field(description="given | latency base | first-parent ancestor | none")
    compared: int = Field(description="(case, target) pairs built at both commits")
    summary: str = Field(description='one line, e.g. "2 cases changed binary size, registers"')
    changes: list[CompileChangeOut] = Field(
        description="binary size, registers, spills, shared bytes that differ (any difference: they are deterministic)")


class PRVerdictOut(_FromAttributes):
    repository: str
    head_sha: str
    verdict: str = Field(description="regressed | improved | similar | insufficient data | no baseline, over "
                                     "every device class; controls left out, drift-marked and unchanged rows "
                                     "counted as similar")
    errored: int = Field(description="rows whose head result was wrong or an error (counted apart from the verdict)")
    counts: dict[str, int]
    comparisons: list[ComparisonOut]
    compile: CompileComparisonOut | None = Field(
        default=None, description="compile statistics against the base (the given one, else the first "
                                  "comparison's, else the newest ancestor with a bundle); not part of `verdict`")


class HistoryPointOut(_FromAttributes):
    sha: str
    committed_at: datetime
    median: float
    min: float
    max: float
    n: int


TriageState = Literal["needs triage", "noisy", "confirmed", "intended", "assigned", "fixed"]
if set(get_args(TriageState)) != set(TRIAGE_STATES):
    raise RuntimeError("schemas.TriageState differs from models.TRIAGE_STATES")
Lifecycle = Literal["suspected", "confirmed", "retracted"]
if set(get_args(Lifecycle)) != set(LIFECYCLE):
    raise RuntimeError("schemas.Lifecycle differs from models.LIFECYCLE")


class ChangePointOut(_FromAttributes):
    id: int
    series_id: int
    case_id: CaseIdAsText
    family: str
    device_class: str
    metric: str
    direction: str = Field(description="regression | improvement, in the series' direction")
    state: str
    magnitude: float = Field(description="after_level / before_level - 1")
    pvalue: float
    before_level: float
    after_level: float
    before_sha: str = Field(description="the commit range is (before_sha, after_sha]")
    after_sha: str
    committed_at: datetime
    detected_at: datetime
    history_index: int
    open: bool = Field(description="open triage state, not retracted, after the series' newest intended change point")
    lifecycle: Lifecycle = Field(description="suspected (the newest commits left their level, not enough of them yet) "
                                 "| confirmed | retracted (later data refute it)")
    reason: str = Field(description="why it was retracted; empty otherwise")
    retracted_at: datetime | None


class TriageEventOut(_FromAttributes):
    id: int
    state: str
    who: str
    at: datetime
    bug_link: str | None
    assignee: str | None
    note: str


class ChangePointDetailOut(ChangePointOut):
    events: list[TriageEventOut] = Field(description="triage history, oldest first; the last is the current state")
    bisection: BisectionView | None = Field(None, description="its newest bisection (the active one when there is "
                                            "one): the steps, and the culprit once found")


class BaselineOut(_FromAttributes):
    change_point_id: int
    sha: str
    level: float


class SeriesSettingsOut(BaseModel):
    min_magnitude: float | None = Field(description="None: the analysis settings' minimum magnitude")
    lower_is_better: bool = Field(description="the series' direction (its own setting or its metric's)")
    lower_is_better_override: bool | None


class SeriesDetailOut(_FromAttributes):
    id: int
    case_id: CaseIdAsText
    device_class: str
    metric: str
    points: int
    latest_median: float | None
    latest_commit: str | None
    settings: SeriesSettingsOut
    baseline: BaselineOut | None = Field(description="the newest intended change point: the series' reference level")
    history: list[HistoryPointOut]
    change_points: list[ChangePointOut]


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


class DashboardSeriesOut(_FromAttributes):
    id: int
    case_id: CaseIdAsText
    metric: str
    state: str = Field(description="regressed | suspected | improved | stable | no data")
    open_change_points: int


class DashboardGroupOut(_FromAttributes):
    family: str
    device_class: str
    counts: dict[str, int]
    series: list[DashboardSeriesOut]


class DashboardOut(_FromAttributes):
    counts: dict[str, int]
    groups: list[DashboardGroupOut]


class CompileSeriesOut(_FromAttributes):
    case_id: CaseIdAsText
    target: str
    commits: int = Field(description="commits whose bundles compiled this case for this target")
    latest: dict[str, float | None] = Field(description="metric -> the newest commit's figure (None: not reported)")


class CompileStepOut(_FromAttributes):
    metric: str
    before_sha: str
    after_sha: str = Field(description="the first commit of the history with the new value")
    before: float | None
    after: float | None
    change: float | None = Field(description="after / before - 1; None when a side is missing or before is 0")


class CompilePointOut(_FromAttributes):
    sha: str
    committed_at: datetime
    status: str = Field(description="built | failed")
    values: dict[str, float | None]


