"""Delivering a result document to the service: in chunks, each a valid result document.

A full suite's paired document is tens of megabytes even packed (`contracts.arrays`), more than
the service's body limit (`max_upload_bytes`, 16 MiB by default). So it goes as several
`POST /results`, each the document's header with a subset of its case results, under a byte
budget well below that limit. Ingest is idempotent per (job, case, target), so a chunk sent twice
(a retry, a resend after a partial delivery) stores nothing the second time. The job is marked
done by the caller only after every chunk is acknowledged (`deliver` returns only then).

Used by the agent (`DeviceAgent.send`, `benchfarm run-job`) and by `benchfarm resend`, which
delivers a document the agent kept after a refusal.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.agents.client import ServiceClient
from pipeline.config import AgentSettings

__all__ = ["DEFAULT_CHUNK_BYTES", "Delivered", "chunks", "deliver", "load_kept", "resend_command"]

DEFAULT_CHUNK_BYTES = AgentSettings.model_fields["upload_chunk_bytes"].default
"""A quarter of the service's default body limit: room for a service set lower."""


@dataclass(frozen=True)
class Delivered:
    chunks: int
    stored: int
    duplicates: int
    samples: int


def chunks(document: dict[str, Any], budget_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[bytes]:
    """The document (JSON form) as serialised chunks: its header with consecutive case results whose
    size adds up to at most `budget_bytes`. A single result larger than the budget goes alone
    (case results are not split: a case is stored whole or not at all)."""
    header = {k: v for k, v in document.items() if k != "results"}
    head = json.dumps(header)[:-1] + ', "results": ['   # the header object, left open for its results
    results = [json.dumps(r) for r in document.get("results", [])]
    if not results:
        yield (head + "]}").encode()
        return
    batch: list[str] = []
    size = len(head) + 2
    for text in results:
        if batch and size + len(text) + 2 > budget_bytes:
            yield (head + ", ".join(batch) + "]}").encode()
            batch, size = [], len(head) + 2
        batch.append(text)
        size += len(text) + 2
    yield (head + ", ".join(batch) + "]}").encode()


def deliver(client: ServiceClient, document: dict[str, Any], *, budget_bytes: int = DEFAULT_CHUNK_BYTES,
            post: Callable[[bytes], Any] | None = None) -> Delivered:
    """POST every chunk of the document, in order; raises the first ServiceError (the chunks
    before it are stored, and sending the whole document again stores only the rest).

    `post`: how one chunk is sent (default `client.post_raw("results", chunk, idempotent=True)`:
    ingest is idempotent, so the chunk carries an Idempotency-Key and is retried); the agent wraps
    it to wait out an unreachable service."""
    send = post or (lambda chunk: client.post_raw("results", chunk, idempotent=True))
    n = stored = duplicates = samples = 0
    for chunk in chunks(document, budget_bytes):
        summary = send(chunk)
        if summary is None:   # the caller stopped while waiting for the service
            raise InterruptedError("delivery stopped before every chunk was acknowledged")
        n += 1
        stored += summary["stored"]
        duplicates += summary["duplicates"]
        samples += summary["samples"]
    return Delivered(chunks=n, stored=stored, duplicates=duplicates, samples=samples)


def load_kept(path: Path) -> tuple[dict[str, Any], str | None]:
    """(result document, agent name or None) of a kept file: a spool file (`{"job_id", "agent",
    "document"}`, as the agent keeps it in spool/ or spool/rejected/) or a bare result document."""
    body = json.loads(Path(path).read_text())
    if not isinstance(body, dict):
        raise ValueError(f"{path}: not a JSON object (a spooled result or a result document)")
    if "document" in body and isinstance(body["document"], dict):
        return body["document"], body.get("agent")
    if "results" in body and "job_id" in body:
        return body, None
    raise ValueError(f"{path}: neither a spooled result ({{job_id, agent, document}}) nor a result document")


def resend_command(path: Path, server: str) -> str:
    """The one line that tells a person how to deliver a kept document."""
    return (f"benchfarm resend {shlex.quote(str(path))} --server {shlex.quote(server)} "
            "--token $BENCHFARM_AGENT__TOKEN")
