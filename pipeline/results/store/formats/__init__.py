"""Results people already produce, in other tools' formats, stored through the ordinary ingest path.

A file and its declared `FormatMapping` become one `ResultDocument` (`to_document`), which
`ingest.ingest_result` stores like any agent's upload: same checks, same idempotency. One module
per format, listed explicitly in `FORMATS`:
- `google-benchmark`: Google Benchmark JSON, e.g. from iree-benchmark-module (`google_benchmark`);
- `nvbench`: NVBench JSON (`nvbench`);
- `pytest-benchmark`: pytest-benchmark JSON (`pytest_benchmark`).
Each module's docstring says which numbers of its format become samples.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from pipeline import __version__
from pipeline.results.analysis.stats import summarize
from pipeline.contracts import CaseResult, ContractError, DeviceInfo, ResultDocument
from pipeline.contracts.foreign import google_benchmark, nvbench, pytest_benchmark
from pipeline.contracts.foreign._common import Benchmark, Parsed
from pipeline.config import AnalysisSettings
from pipeline.contracts.result import AgentInfo
from pipeline.results.store import ingest, queue
from pipeline.results.store.formats._mapping import CaseRule, FormatMapping
from pipeline.results.store.models import Job, Run, utcnow
from pipeline.results.store.queue import JobHolding

__all__ = [
    "FORMATS",
    "Benchmark",
    "CaseRule",
    "FormatMapping",
    "ImportOutcome",
    "Parsed",
    "import_results",
    "parse",
    "to_document",
]

FORMATS: dict[str, Callable[[Any], Parsed]] = {
    google_benchmark.NAME: google_benchmark.parse,
    nvbench.NAME: nvbench.parse,
    pytest_benchmark.NAME: pytest_benchmark.parse,
}
_RUN_NAMESPACE = uuid.UUID("6d1f2a52-5a55-4a8e-9f0e-62656e636866")


@dataclass(frozen=True)
class ImportOutcome:
    run_id: str
    job_id: str
    cases: dict[str, str]
    """benchmark name -> case id"""
    summary: ingest.IngestSummary


def parse(format: str, data: Any, files: dict[str, bytes] | None = None) -> Parsed:
    """`data` parsed by its format's reader; `files`: side files it references (NVBench's sample times)."""
    if format not in FORMATS:
        raise ContractError("import", [("format", f"unknown format {format!r}; known: {', '.join(FORMATS)}")])
    if files and format != "nvbench":
        raise ContractError("import", [("files", f"{format} files reference no side files")])
    return nvbench.parse(data, files) if format == "nvbench" else FORMATS[format](data)


def _case_result(benchmark: Benchmark, case: str, target: str, environment: dict[str, str]) -> CaseResult:
    env = {**environment, **benchmark.environment, "benchmark": benchmark.name}
    if benchmark.error is not None:
        return CaseResult(case=case, target=target, status="error", reason=benchmark.error, environment=env)
    if benchmark.skipped is not None:
        return CaseResult(case=case, target=target, status="skipped", reason=benchmark.skipped, environment=env)
    return CaseResult(case=case, target=target, status="ok", samples=benchmark.samples,
                      stats=summarize(benchmark.samples), environment=env)


def to_document(parsed: Parsed, mapping: FormatMapping, *, run_id: str, job_id: str) -> tuple[ResultDocument, dict[str, str]]:
    """The result document of a parsed file under `mapping`, and which case each benchmark became.

    Refused (ContractError naming the fields): benchmarks no rule maps (unless `unmapped` is
    ignore), two benchmarks mapped onto one case and target, a file with nothing to store.
    """
    errors: list[tuple[str, str]] = []
    results: list[CaseResult] = []
    cases: dict[str, str] = {}
    taken: dict[tuple[str, str], str] = {}
    for benchmark in parsed.benchmarks:
        rule = next((r for r in mapping.rules if r.case_for(benchmark.name) is not None), None)
        if rule is None:
            if mapping.unmapped == "error":
                errors.append((f"data.{benchmark.field}", f"no mapping rule matches benchmark {benchmark.name!r}"))
            continue
        case = rule.case_for(benchmark.name) or ""
        key = (case, rule.target)
        if key in taken:
            reason = f"benchmark {benchmark.name!r} maps onto {case} on {rule.target}, as {taken[key]!r} does already"
            errors.append((f"data.{benchmark.field}", reason))
            continue
        taken[key] = benchmark.name
        try:
            results.append(_case_result(benchmark, case, rule.target, parsed.environment))
        except ValidationError as exc:
            errors.extend((f"data.{benchmark.field}", f"maps onto {case!r}: {e['msg']}") for e in exc.errors(include_url=False))
            continue
        cases[benchmark.name] = case
    if not errors and not results:
        errors.append(("data", "no benchmark to store" + (" (every one unmapped and ignored)" if parsed.benchmarks else "")))
    if errors:
        raise ContractError(f"{parsed.tool} import", errors)
    now = utcnow()
    try:
        device = DeviceInfo(device_class=mapping.device_class,
                            uid=mapping.device_uid or f"import:{mapping.device_class}:{parsed.host or 'unknown-host'}",
                            name=parsed.device_name, host=parsed.host)
    except ValidationError as exc:   # the parsers bound the names they pass on; a miss is still the file's 422
        raise ContractError(f"{parsed.tool} import", [
            (f"device.{'.'.join(map(str, e['loc']))}", e["msg"]) for e in exc.errors(include_url=False)]) from None
    document = ResultDocument(
        run_id=run_id, job_id=job_id, repository=mapping.repository, commit=mapping.commit, device=device,
        agent=AgentInfo(name=f"import:{parsed.tool}", version=__version__), started_at=now,
        finished_at=now, environment={"imported_from": parsed.tool}, results=results,
    )
    return document, cases


def _run_id(format: str, data: Any, mapping: FormatMapping) -> str:
    """The id of the run made for this file under this mapping: the same content gives the same run."""
    canonical = json.dumps({"format": format, "data": data, "mapping": mapping.model_dump(mode="json")},
                           sort_keys=True, separators=(",", ":"), allow_nan=True)
    return str(uuid.uuid5(_RUN_NAMESPACE, hashlib.sha256(canonical.encode()).hexdigest()))


def _job(session: Session, format: str, data: Any, mapping: FormatMapping) -> tuple[Job, bool]:
    """The job the file's results go to, and whether it was made now."""
    if mapping.job_id is not None:
        job = session.get(Job, mapping.job_id)
        if job is None:
            raise ingest.IngestError(f"mapping.job_id: unknown job {mapping.job_id}")
        return job, False
    run_id = _run_id(format, data, mapping)
    run = session.get(Run, run_id)
    if run is not None:
        return run.jobs[0], False
    try:
        run = ingest.create_run(session, repository=mapping.repository, commit_sha=mapping.commit, kind=mapping.kind,
                                device_classes=[mapping.device_class], run_id=run_id)
    except ingest.IngestError as exc:
        field, _, reason = str(exc).partition(": ")
        field = {"commit_sha": "commit", "device_classes.0": "device_class"}.get(field, field)
        raise ingest.IngestError(f"mapping.{field}: {reason}") from None
    return run.jobs[0], True


def import_results(session: Session, *, format: str, data: Any, mapping: FormatMapping,
                   analysis: AnalysisSettings | None, files: dict[str, bytes] | None = None,
                   admit: Callable[[JobHolding, ResultDocument], None] | None = None) -> ImportOutcome:
    """Parse a foreign file, map it, and ingest it as one job's result document (idempotent).

    Nothing is written before the file has been parsed and mapped; a refusal afterwards (an
    unknown case, say) raises inside the caller's transaction, which then writes nothing.
    `admit`: called with who holds the job `mapping.job_id` names and the document before it is stored,
    to refuse it (the caller's object-level rules: whose job, in which state).
    """
    parsed = parse(format, data, files)
    placeholder = "0" * 8
    to_document(parsed, mapping, run_id=placeholder, job_id=placeholder)  # refuse a bad file before any write
    job, made = _job(session, format, data, mapping)
    document, cases = to_document(parsed, mapping, run_id=job.run_id, job_id=job.id)
    if admit is not None and mapping.job_id is not None:
        holding = queue.job_holding(session, job.id)
        assert holding is not None   # found or made above
        admit(holding, document)
    summary = ingest.ingest_result(session, document=document, analysis=analysis)
    if made:
        ingest.set_job_status(session, job_id=job.id, status="done", agent=document.agent.name)
    return ImportOutcome(run_id=job.run_id, job_id=job.id, cases=cases, summary=summary)
