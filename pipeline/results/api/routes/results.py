"""POST /results and /results/batch: device agents' result documents, ingested idempotently.

Bodies are read by `BodyDep` (bounded while streaming) and validated by `parse_result`, the one
way a document enters the system; errors name the field, prefixed by the document's index in a
batch. A request is one transaction: a refused document leaves the store as it was.
"""

from __future__ import annotations

import json

from fastapi import APIRouter

from pipeline.contracts import ContractError, ResultDocument, parse_result
from pipeline.results import ingest
from pipeline.results.api.deps import BodyDep, SessionDep, SettingsDep, require_scope
from pipeline.results.api.schemas import (
    ERROR_RESPONSES,
    BatchSummary,
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
def upload_results(body: BodyDep, session: SessionDep, settings: SettingsDep) -> UploadSummary:
    document = parse_result(body)
    return _summary(document.job_id, ingest.ingest_result(session, document=document, analysis=settings.analysis))


@router.post(
    "/results/batch", response_model=BatchSummary,
    summary="Upload a list of result documents, all or nothing",
    description="One transaction: any document that does not validate or that the store cannot take refuses "
                "the whole batch (422 naming its index and field) and nothing is written. Case results already "
                "stored count as duplicates, so sending a batch again succeeds and writes nothing.",
    openapi_extra=json_body(list[ResultDocument], "a JSON array of result documents; needs the agent scope"),
)
def upload_batch(body: BodyDep, session: SessionDep, settings: SettingsDep) -> BatchSummary:
    documents = parse_batch(body)
    summaries = []
    for i, document in enumerate(documents):
        try:
            summaries.append(_summary(document.job_id, ingest.ingest_result(
                session, document=document, analysis=settings.analysis)))
        except ingest.IngestError as exc:
            raise ingest.IngestError(f"{i}.{exc}") from None
    return BatchSummary(documents=summaries, stored=sum(s.stored for s in summaries),
                        duplicates=sum(s.duplicates for s in summaries), samples=sum(s.samples for s in summaries))


def parse_batch(body: bytes) -> list[ResultDocument]:
    """Every document of the batch, or ContractError listing each bad one's fields as `<index>.<field>`."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ContractError("batch of result documents", [("(document)", f"not JSON: {exc}")]) from None
    if not isinstance(data, list):
        raise ContractError("batch of result documents", [("(document)", "must be a JSON array of result documents")])
    if not data:
        raise ContractError("batch of result documents", [("(document)", "empty batch")])
    documents, errors = [], []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            errors.append((str(i), "must be a JSON object (a result document)"))
            continue
        try:
            documents.append(parse_result(item))
        except ContractError as exc:
            errors.extend((f"{i}.{field}", reason) for field, reason in exc.errors)
    if errors:
        raise ContractError("batch of result documents", errors)
    return documents
