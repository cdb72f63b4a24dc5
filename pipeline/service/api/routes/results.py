"""POST /results and /results/batch: device agents' result documents, ingested idempotently.

Who may write (object level, beyond the agent scope): results go only into a job leased to an
agent registered with the caller's token (an admin token may write anywhere), while it runs, or
after it failed (the agent's kept results, re-sent by `benchfarm resend`); into a queued or done
job only an identical re-send is taken (every case result already stored: a duplicate, nothing
written), anything new is 409.

Bodies are read by `BodyDep` (bounded while streaming) and validated by `parse_result`, the one
way a document enters the system; errors name the field, prefixed by the document's index in a
batch. A request is one transaction: a refused document leaves the store as it was.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException

from pipeline.contracts import ContractError, ResultDocument, parse_result, strict_json
from pipeline.service.api.deps import (
    BodyDep,
    Principal,
    SessionDep,
    SettingsDep,
    require_scope,
)
from pipeline.service.api.routes.agents import check_job_holder
from pipeline.service.api.schemas import (
    CONFLICT,
    ERROR_RESPONSES,
    BatchSummary,
    UploadSummary,
    json_body,
)
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.results.store import ingest, queue
from pipeline.results.store.db import Session
from pipeline.results.store.queue import JobHolding

router = APIRouter(route_class=StrictJsonRoute, tags=["results"], responses={**ERROR_RESPONSES, **CONFLICT})
AgentWriter = Annotated[Principal, require_scope("agent")]


def refuse_new_results(session: Session, job: JobHolding, document: ResultDocument) -> None:
    """409 when `document` holds a case result `job` has not stored: for a job that takes only
    identical re-sends (all duplicates, nothing written)."""
    new = {(r.case, r.target) for r in document.results} - queue.stored_case_targets(session, job.id)
    if new:
        raise HTTPException(409, f"job {job.id} is {job.status}: it takes no new results "
                                 f"({len(new)} case results not stored yet)")


def _ingest_as(session: Session, document: ResultDocument, settings: SettingsDep,
               principal: Principal) -> ingest.IngestSummary:
    """`ingest.ingest_result` under the object-level rules of the module doc (403 / 409)."""
    job = queue.job_holding(session, document.job_id)
    if job is None:   # ingest names the unknown job
        return ingest.ingest_result(session, document=document, analysis=settings.analysis)
    check_job_holder(job, principal)
    # running: its agent's results; failed: its agent's kept results (`benchfarm resend` after a refused
    # upload, which then completes it); an admin may also repair any job
    if not (job.status in ("running", "failed") and job.holder is not None or principal.allows("admin")):
        refuse_new_results(session, job, document)   # a queued or done job: an identical re-send only
    return ingest.ingest_result(session, document=document, analysis=settings.analysis)


def _summary(job_id: str, summary: ingest.IngestSummary) -> UploadSummary:
    return UploadSummary(job_id=job_id, stored=summary.stored, duplicates=summary.duplicates, samples=summary.samples)


@router.post(
    "/results", response_model=UploadSummary,
    summary="Upload one result document (idempotent on job, case and target)",
    openapi_extra=json_body(ResultDocument, "a result document (schema_version 1); needs the agent scope"),
)
def upload_results(body: BodyDep, session: SessionDep, settings: SettingsDep, principal: AgentWriter) -> UploadSummary:
    document = parse_result(body)
    return _summary(document.job_id, _ingest_as(session, document, settings, principal))


@router.post(
    "/results/batch", response_model=BatchSummary,
    summary="Upload a list of result documents, all or nothing",
    description="One transaction: any document that does not validate or that the store cannot take refuses "
                "the whole batch (422 naming its index and field) and nothing is written. Case results already "
                "stored count as duplicates, so sending a batch again succeeds and writes nothing.",
    openapi_extra=json_body(list[ResultDocument], "a JSON array of result documents; needs the agent scope"),
)
def upload_batch(body: BodyDep, session: SessionDep, settings: SettingsDep, principal: AgentWriter) -> BatchSummary:
    documents = parse_batch(body)
    summaries = []
    for i, document in enumerate(documents):
        try:
            summaries.append(_summary(document.job_id, _ingest_as(session, document, settings, principal)))
        except ingest.IngestError as exc:
            raise ingest.IngestError(f"{i}.{exc}") from None
        except HTTPException as exc:
            raise HTTPException(exc.status_code, f"{i}: {exc.detail}") from None
    return BatchSummary(documents=summaries, stored=sum(s.stored for s in summaries),
                        duplicates=sum(s.duplicates for s in summaries), samples=sum(s.samples for s in summaries))


def parse_batch(body: bytes) -> list[ResultDocument]:
    """Every document of the batch, or ContractError listing each bad one's fields as `<index>.<field>`."""
    try:
        data = strict_json.loads(body)
    except strict_json.BodyError as exc:
        raise ContractError("batch of result documents", [(exc.field, str(exc))]) from None
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
