"""POST /results: device agents' result documents, ingested idempotently.

Bodies are read by `BodyDep` (bounded while streaming) and validated by `parse_result`, the one
way a document enters the system; errors name the field. A request is one transaction: a refused
document leaves the store as it was.
"""

from __future__ import annotations

from fastapi import APIRouter

from pipeline.contracts import ResultDocument, parse_result
from pipeline.results import ingest
from pipeline.results.api.deps import BodyDep, SessionDep, require_scope
from pipeline.results.api.schemas import (
    ERROR_RESPONSES,
    UploadSummary,
    json_body,
)

router = APIRouter(tags=["results"], dependencies=[require_scope("agent")], responses=ERROR_RESPONSES)


def _summary(job_id: str, summary: ingest.IngestSummary) -> UploadSummary:
    return UploadSummary(job_id=job_id, stored=summary.stored, duplicates=summary.duplicates, samples=summary.samples)


@router.post(
    "/results", response_model=UploadSummary,
    summary="Upload one result document (idempotent on job, case and target)",
    openapi_extra=json_body(ResultDocument, "a result document (schema_version 1); needs the agent scope"),
)
def upload_results(body: BodyDep, session: SessionDep) -> UploadSummary:
    document = parse_result(body)
    return _summary(document.job_id, ingest.ingest_result(session, document=document))
