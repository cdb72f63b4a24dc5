"""POST /import/{format}: a Google Benchmark, NVBench or pytest-benchmark JSON file with its mapping."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal, get_args

from fastapi import APIRouter
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from pipeline.contracts import ContractError, ResultDocument, strict_json
from pipeline.service.api.deps import BodyDep, SessionDep, SettingsDep
from pipeline.service.api.routes.agents import check_job_holder
from pipeline.service.api.routes.results import AgentWriter, refuse_new_results
from pipeline.service.api.schemas import (
    CONFLICT,
    ERROR_RESPONSES,
    ImportSummary,
    json_body,
)
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.results.store import formats
from pipeline.results.store.queue import JobHolding

router = APIRouter(route_class=StrictJsonRoute, tags=["import"], responses={**ERROR_RESPONSES, **CONFLICT})

FormatName = Literal["google-benchmark", "nvbench", "pytest-benchmark"]
if set(get_args(FormatName)) != set(formats.FORMATS):
    raise RuntimeError("the import route's format names differ from pipeline.results.store.formats.FORMATS")


def _base64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"not base64: {exc}") from None


SideFile = Annotated[str, Field(json_schema_extra={"contentEncoding": "base64"}), AfterValidator(_base64)]
"""Base64 text, strictly (pydantic's Base64Bytes skips what is not base64, so '%%%' would be an empty file)."""


class ImportRequest(BaseModel):
    """The envelope: the mapping, and the tool's JSON output unchanged."""

    model_config = ConfigDict(extra="forbid")

    mapping: formats.FormatMapping
    data: Any = Field(description="the file the tool wrote, as JSON (not a string holding it)")
    files: dict[str, SideFile] = Field(default_factory=dict, description="side files the file references, by the "
                                       "name it gives them, base64: NVBench's sample times (--jsonbin)")


@router.post(
    "/import/{format}", response_model=ImportSummary,
    summary="Import a Google Benchmark, NVBench or pytest-benchmark JSON file, mapped onto cases",
    description="The file's benchmarks are mapped onto case ids and targets by `mapping.rules` and stored as one "
                "job's result document through the ordinary ingest path: the commit must be recorded and the "
                "cases registered. All or nothing; sending the same file with the same mapping again stores "
                "nothing and succeeds. Samples per format: google-benchmark, one per repetition (run_type "
                "iteration, real_time); pytest-benchmark, stats.data (every round) or else the "
                "median alone; nvbench, every sample time of a state when its side file is in `files`, else its mean cold GPU time alone.",
    openapi_extra=json_body(ImportRequest, "the mapping and the file; needs the agent scope"),
)
def import_file(format: FormatName, body: BodyDep, session: SessionDep, principal: AgentWriter,
                settings: SettingsDep) -> ImportSummary:
    request = parse_request(body)

    def admit(job: JobHolding, document: ResultDocument) -> None:
        """A named job: only another agent's is refused (403), and a done one takes an identical
        re-send only (409); a job no agent holds (a queued nightly, say) takes the file."""
        check_job_holder(job, principal)
        if job.status == "done" and not principal.allows("admin"):
            refuse_new_results(session, job, document)

    outcome = formats.import_results(session, format=format, data=request.data, mapping=request.mapping,
                                     analysis=settings.analysis,
                                     # SideFile is declared str (the schema's base64 text); its validator made it bytes
                                     files=dict(request.files), admit=admit)  # type: ignore[arg-type]
    s = outcome.summary
    return ImportSummary(job_id=outcome.job_id, run_id=outcome.run_id, format=format, cases=outcome.cases,
                         stored=s.stored, duplicates=s.duplicates, samples=s.samples)


def parse_request(body: bytes) -> ImportRequest:
    try:
        data = strict_json.loads(body)
    except strict_json.BodyError as exc:
        raise ContractError("import request", [(exc.field, str(exc))]) from None
    try:
        return ImportRequest.model_validate(data)
    except ValidationError as exc:
        raise ContractError("import request", [(".".join(str(p) for p in e["loc"]) or "(document)", e["msg"])
                                               for e in exc.errors(include_url=False)]) from None
