"""POST /import/{format}: a Google Benchmark, NVBench or pytest-benchmark JSON file with its mapping."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import Base64Bytes, BaseModel, ConfigDict, Field, ValidationError

from pipeline.contracts import ContractError, strict_json
from pipeline.service.api.deps import BodyDep, SessionDep, require_scope
from pipeline.service.api.schemas import ERROR_RESPONSES, ImportSummary, json_body
from pipeline.store import formats

router = APIRouter(tags=["import"], dependencies=[require_scope("agent")], responses=ERROR_RESPONSES)

FormatName = Literal["google-benchmark", "nvbench", "pytest-benchmark"]
if set(FormatName.__args__) != set(formats.FORMATS):  # type: ignore[attr-defined]
    raise RuntimeError("the import route's format names differ from pipeline.store.formats.FORMATS")


class ImportRequest(BaseModel):
    """The envelope: the mapping, and the tool's JSON output unchanged."""

    model_config = ConfigDict(extra="forbid")

    mapping: formats.FormatMapping
    data: Any = Field(description="the file the tool wrote, as JSON (not a string holding it)")
    files: dict[str, Base64Bytes] = Field(default_factory=dict, description="side files the file references, by the "
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
def import_file(format: FormatName, body: BodyDep, session: SessionDep) -> ImportSummary:
    request = parse_request(body)
    outcome = formats.import_results(session, format=format, data=request.data, mapping=request.mapping,
                                     files=dict(request.files))
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
