"""POST /results: a device agent's result document, ingested in one transaction, idempotently."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request

from pipeline.contracts import parse_result
from pipeline.results import ingest
from pipeline.results.api.deps import SessionDep, SettingsDep, WriterDep

router = APIRouter(tags=["results"])


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than `limit` bytes even when no Content-Length was sent."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"request body over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


@router.post("/results", dependencies=[WriterDep], status_code=200,
             summary="Upload a result document (idempotent on job, case and target)")
async def upload_results(request: Request, session: SessionDep, settings: SettingsDep) -> dict[str, object]:
    document = parse_result(await read_body(request, settings.max_upload_bytes))
    summary = ingest.ingest_result(session, document=document)
    return {"job_id": document.job_id, "stored": summary.stored, "duplicates": summary.duplicates}
