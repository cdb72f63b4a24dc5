"""Writing into the store: repositories, commits, device classes, runs and jobs, manifests, results.

Every function takes a Session and leaves the transaction to the caller (`session_scope`):
nothing here commits. Validation happens before the first write, and any failure raises, so a
caller that lets the exception leave its `session_scope` block keeps the store exactly as it was.

Errors a client can fix raise `IngestError` (a ValueError) whose message starts with the field
of the document at fault, e.g. `results.3.case: unknown case gemm/x/...`.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.results.analysis.stats import summarize
from pipeline.config import AnalysisSettings
from pipeline.contracts import (
    BundleManifest,
    CaseId,
    CaseResult,
    CommitInfo,
    DeviceClass,
    DeviceInfo,
    ResultDocument,
    bundle_digest,
)
from pipeline.contracts.arrays import to_blob
from pipeline.contracts.metrics import LATENCY
from pipeline.results.store import code
from pipeline.results.store.analysis import analyze_after_ingest, learn_paired_noise
from pipeline.results.store.db import dialect_insert
from pipeline.results.store.history import extend_generations, update_generations
from pipeline.results.store.models import (
    Agent,
    Bundle,
    Case,
    CaseResultRow,
    CodeListing,
    Commit,
    CommitParent,
    CompileStat,
    CounterValue,
    Device,
    DeviceClassRow,
    Job,
    Measurement,
    Repository,
    Run,
    Series,
    utcnow,
)
from pipeline.results.store.states import JOB_STATUSES, RUN_KINDS


class IngestError(ValueError):
    """A document or request the store cannot take; the message names the field at fault."""


@dataclass(frozen=True)
class IngestSummary:
    stored: int
    """case results written by this call"""
    duplicates: int
    """case results already stored for this (job, case, target), skipped"""
    samples: int = 0
    """samples written by this call"""


# --- helpers ---------------------------------------------------------------------------------


def _insert_ignoring_conflicts(session: Session, table: sa.Table, rows: list[dict[str, Any]], keys: list[str]) -> None:
    """INSERT ... ON CONFLICT DO NOTHING: a row another transaction just wrote is not an error."""
    if not rows:
        return
    session.execute(dialect_insert(session, table).on_conflict_do_nothing(index_elements=keys), rows)


def _repository(session: Session, name: str | Repository, field: str = "repository") -> Repository:
    if isinstance(name, Repository):
        return name
    repo = session.scalar(sa.select(Repository).where(Repository.name == name))
    if repo is None:
        raise IngestError(f"{field}: unknown repository {name!r}")
    return repo


def _commit(session: Session, repository: Repository, sha: str, field: str = "commit") -> Commit:
    commit = session.scalar(sa.select(Commit).where(Commit.repository_id == repository.id, Commit.sha == sha))
    if commit is None:
        raise IngestError(f"{field}: commit {sha} of {repository.name} is not recorded; record it first")
    return commit


# --- repositories and commits ----------------------------------------------------------------


def upsert_repository(session: Session, *, name: str, url: str | None = None,
                      default_branch: str | None = None) -> Repository:
    """The repository called `name`, created when missing; a given url or default branch replaces
    the stored one."""
    if not name:
        raise IngestError("repository: empty name")
    repo = session.scalar(sa.select(Repository).where(Repository.name == name))
    if repo is None:
        repo = Repository(name=name, url=url, default_branch="main")
        session.add(repo)
        session.flush()
    elif url is not None and repo.url != url:
        repo.url = url
    if default_branch is not None:
        repo.default_branch = default_branch
    return repo


def record_commits(
    session: Session, *, repository: str | Repository, commits: Sequence[CommitInfo]
) -> list[Commit]:
    """Store commits and their parents (in git order) and keep every commit's first-parent
    generation (`Commit.generation`, history's order) in line; idempotent.

    The repository (a name or a row) is created when missing. A commit already stored keeps its fields, except that
    a missing branch, pull request or parent list is filled in. Returns the rows in input order.
    """
    repo = repository if isinstance(repository, Repository) else upsert_repository(session, name=repository)
    shas = list(dict.fromkeys(c.sha for c in commits))
    changed = False
    added: list[Commit] = []
    existing = {
        c.sha: c
        for c in session.scalars(sa.select(Commit).where(Commit.repository_id == repo.id, Commit.sha.in_(shas)))
    }
    for info in commits:
        row = existing.get(info.sha)
        if row is None:
            row = Commit(
                repository_id=repo.id,
                sha=info.sha,
                message=info.message,
                author=info.author,
                committed_at=info.committed_at,
                branch=info.branch,
                pull_request=info.pull_request,
                parents=[CommitParent(position=i, parent_sha=p) for i, p in enumerate(info.parents)],
            )
            session.add(row)
            existing[info.sha] = row
            added.append(row)
            continue
        if row.branch is None and info.branch is not None:
            row.branch = info.branch
        if row.pull_request is None and info.pull_request is not None:
            row.pull_request = info.pull_request
        if not row.parents and info.parents:
            row.parents = [CommitParent(position=i, parent_sha=p) for i, p in enumerate(info.parents)]
            changed = True
    session.flush()
    # history's order: the generations, new commits' and their recorded descendants'
    if changed or (added and not extend_generations(session, repo.id, added)):
        update_generations(session, repo.id)
    return [existing[c.sha] for c in commits]


# --- device classes and devices --------------------------------------------------------------


def upsert_device_class(session: Session, device_class: DeviceClass) -> DeviceClassRow:
    """Create or update the device class of that name from its contract."""
    row = session.scalar(sa.select(DeviceClassRow).where(DeviceClassRow.name == device_class.name))
    if row is None:
        row = DeviceClassRow(name=device_class.name)
        session.add(row)
    row.kind = device_class.kind
    row.targets = list(device_class.targets)
    row.runtime = device_class.runtime
    row.hal_driver = device_class.hal_driver
    row.description = device_class.description
    session.flush()
    return row


class DeviceClassConflict(IngestError):
    """A device class named again with another definition by a caller who may not change it."""


def ensure_device_class(session: Session, device_class: DeviceClass, *, may_redefine: bool) -> DeviceClassRow:
    """The device class of that name, created from its contract when missing; an existing one with
    another definition (kind, targets, runtime, HAL driver) is changed only when `may_redefine`
    (an admin), else DeviceClassConflict: a job's agent must not turn a GPU class into a CPU one."""
    row = session.scalar(sa.select(DeviceClassRow).where(DeviceClassRow.name == device_class.name))
    if row is None or may_redefine:
        return upsert_device_class(session, device_class)
    stored = (row.kind, list(row.targets), row.runtime, row.hal_driver)
    wanted = (device_class.kind, list(device_class.targets), device_class.runtime, device_class.hal_driver)
    if stored != wanted:
        raise DeviceClassConflict(
            f"device_class: {device_class.name!r} is defined as {row.kind} {','.join(row.targets)} ({row.runtime}); "
            f"only an admin token may redefine it")
    return row


def _device_class(session: Session, name: str, field: str) -> DeviceClassRow:
    row = session.scalar(sa.select(DeviceClassRow).where(DeviceClassRow.name == name))
    if row is None:
        raise IngestError(f"{field}: unknown device class {name!r}")
    return row


def upsert_device(session: Session, *, info: DeviceInfo) -> Device:
    """The device with that uid, created when first seen; its descriptive fields and last_seen updated."""
    device_class = _device_class(session, info.device_class, "device.device_class")
    now = utcnow()
    device = session.scalar(sa.select(Device).where(Device.uid == info.uid))
    if device is None:
        device = Device(uid=info.uid, first_seen=now)
        session.add(device)
    device.device_class_id = device_class.id
    device.name = info.name
    device.host = info.host
    device.driver = info.driver
    device.last_seen = now
    session.flush()
    return device


# --- runs and jobs ---------------------------------------------------------------------------


def create_run(
    session: Session, *, repository: str | Repository, commit_sha: str, kind: str, device_classes: Sequence[str],
    run_id: str | None = None, owner: str | None = None,
) -> Run:
    """A queued run of a recorded commit (repository by name or row) with one queued job per device class.

    `run_id`: the run's id when the caller derives one (an import names its run after its content,
    so that a second import of the same file finds it); a new UUID otherwise. `owner`: the local
    process that runs the jobs itself, without a lease (`Job.owner`)."""
    if kind not in RUN_KINDS:
        raise IngestError(f"kind: {kind!r} is not one of {', '.join(RUN_KINDS)}")
    if not device_classes:
        raise IngestError("device_classes: a run needs at least one device class")
    if len(set(device_classes)) != len(device_classes):
        raise IngestError("device_classes: listed twice: " + ", ".join(sorted(
            {d for d in device_classes if list(device_classes).count(d) > 1})))
    repo = _repository(session, repository)
    commit = _commit(session, repo, commit_sha, field="commit_sha")
    classes = [_device_class(session, name, f"device_classes.{i}") for i, name in enumerate(device_classes)]
    now = utcnow()
    run = Run(id=run_id or str(uuid.uuid4()), repository_id=repo.id, commit_id=commit.id, kind=kind, status="queued", created_at=now)
    run.jobs = [
        Job(id=str(uuid.uuid4()), device_class_id=dc.id, status="queued", attempts=0, created_at=now, owner=owner)
        for dc in classes
    ]
    session.add(run)
    session.flush()
    return run


def _run_status(job_statuses: Iterable[str]) -> str:
    """queued while no job has started; done when all are done; failed once all finished and one
    failed; running otherwise."""
    statuses = list(job_statuses)
    if all(s == "queued" for s in statuses):
        return "queued"
    if all(s == "done" for s in statuses):
        return "done"
    if all(s in ("done", "failed") for s in statuses):
        return "failed"
    return "running"


def set_job_status(
    session: Session, *, job_id: str, status: str, error: str | None = None, agent: str | None = None
) -> Job:
    """Move a job to `status` and its run to the status its jobs imply.

    running: counts an attempt, sets started_at, clears finished_at; done/failed: sets
    finished_at; queued (a retry): clears both. The run's finished_at is set when it ends and its
    error lists the failed jobs.
    """
    if status not in JOB_STATUSES:
        raise IngestError(f"status: {status!r} is not one of {', '.join(JOB_STATUSES)}")
    job = session.get(Job, job_id)
    if job is None:
        raise IngestError(f"job_id: unknown job {job_id}")
    now = utcnow()
    job.status = status
    job.error = error
    if agent is not None:
        job.agent = agent
    if status == "running":
        job.attempts += 1
        job.started_at = now
        job.finished_at = None
    elif status == "queued":
        job.started_at = None
        job.finished_at = None
    else:
        job.finished_at = now

    run = job.run
    run.status = _run_status(j.status for j in run.jobs)
    if run.status in ("done", "failed"):
        run.finished_at = run.finished_at or now
    else:
        run.finished_at = None
    failed = [j for j in run.jobs if j.status == "failed"]
    run.error = "; ".join(f"job {j.id} on {j.device_class.name} failed: {j.error or 'no reason given'}" for j in failed) or None
    session.flush()
    return job


# --- bundles ---------------------------------------------------------------------------------


def _register_cases(session: Session, models: dict[str, str]) -> dict[str, int]:
    """Make sure every case id exists; returns case id text -> cases.id. A model name fills an empty one."""
    rows = []
    for text in models:
        parsed = CaseId.parse(text)
        rows.append({"case_id": text, "family": parsed.family, "name": parsed.name, "shape": parsed.shape,
                     "dtype": parsed.dtype, "impl": parsed.impl, "model": models[text]})
    _insert_ignoring_conflicts(session, Case.__table__, rows, ["case_id"])
    found = [(case_pk, str(case_id), model) for case_pk, case_id, model in session.execute(
        sa.select(Case.id, Case.case_id, Case.model).where(Case.case_id.in_(list(models))))]
    for case_pk, text, model in found:
        if not model and models[text]:
            session.execute(sa.update(Case).where(Case.id == case_pk).values(model=models[text]))
    return {text: case_pk for case_pk, text, _ in found}


def ingest_manifest(session: Session, *, manifest: BundleManifest, path: str, bundle_dir: Path | None = None) -> str:
    """Register a bundle (returns its digest), its cases and their compile statistics and code evidence; idempotent on
    `bundle_digest`. With `bundle_dir` (the bundle's files), each entry's normalized listing is kept
    too (`code_listings`, once per digest), read and checked against its digest: the comparisons
    diff them. Refused (IngestError, nothing written): a listing missing or not matching its digest.

    The manifest's repository and commit must have been recorded (`record_commits`).
    """
    digest = bundle_digest(manifest)
    bundle = session.scalar(sa.select(Bundle).where(Bundle.digest == digest))
    if bundle is not None:
        if bundle_dir is not None:   # registered from its manifest alone first (an external job): listings now
            _store_listings(session, manifest, bundle_dir)
        return digest
    listing_rows = _listing_rows(session, manifest, bundle_dir) if bundle_dir is not None else []
    repo = _repository(session, manifest.repository)
    commit = _commit(session, repo, manifest.commit)

    models: dict[str, str] = {}
    for entry in manifest.entries:
        if entry.model or entry.case not in models:
            models[entry.case] = entry.model
    case_ids = _register_cases(session, models)

    bundle = Bundle(digest=digest, repository_id=repo.id, commit_id=commit.id, suite_digest=manifest.suite_digest,
                    path=path, created_at=manifest.created_at)
    session.add(bundle)
    session.flush()
    stats = []
    for entry in manifest.entries:
        c = entry.compile
        stats.append({
            "bundle_id": bundle.id, "case_id": case_ids[entry.case], "target": entry.target, "status": entry.status,
            "error": entry.error,
            "compiler": c.compiler if c else None, "compiler_version": c.compiler_version if c else None,
            "compile_time_s": c.compile_time_s if c else None, "binary_bytes": c.binary_bytes if c else None,
            "registers": c.registers if c else None, "spills": c.spills if c else None,
            "shared_bytes": c.shared_bytes if c else None, "flops": entry.flops, "bytes": entry.bytes,
            "code_tool": entry.code.tool if entry.code else None,
            "code_digest": entry.code.digest if entry.code else None,
            "code_unavailable": entry.code.unavailable if entry.code else None,
            "instructions": entry.code.instructions.model_dump(mode="json") if entry.code and entry.code.instructions
            else None,
        })
    if stats:
        session.execute(sa.insert(CompileStat.__table__), stats)
    _insert_ignoring_conflicts(session, CodeListing.__table__, listing_rows, ["digest"])
    return digest


def _listing_rows(session: Session, manifest: BundleManifest, bundle_dir: Path) -> list[dict[str, Any]]:
    """The `code_listings` rows of the manifest's listings not stored yet, read from the bundle and
    checked against their digests."""
    wanted = {e.code.digest: e.code.listing for e in manifest.entries
              if e.code is not None and e.code.digest is not None and e.code.listing is not None}
    stored = set(session.scalars(sa.select(CodeListing.digest).where(CodeListing.digest.in_(list(wanted))))) \
        if wanted else set()
    rows = []
    for digest, relative in sorted(wanted.items()):
        if digest in stored:
            continue
        try:
            data = (bundle_dir / relative).read_bytes()
        except OSError as exc:
            raise IngestError(f"code listing {relative}: not readable in the bundle {bundle_dir} ({exc})") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise IngestError(f"code listing {relative}: its sha256 is not the manifest's code.digest {digest[:12]}")
        rows.append(code.listing_row(digest, data.decode()))
    return rows


def _store_listings(session: Session, manifest: BundleManifest, bundle_dir: Path) -> None:
    _insert_ignoring_conflicts(session, CodeListing.__table__,
                               _listing_rows(session, manifest, bundle_dir), ["digest"])


# --- results ---------------------------------------------------------------------------------


def _check_document(session: Session, document: ResultDocument) -> tuple[Job, Run, dict[str, int]]:
    """Everything ingest_result refuses, checked before anything is written."""
    job = session.get(Job, document.job_id)
    if job is None:
        raise IngestError(f"job_id: unknown job {document.job_id}")
    run = job.run
    if job.run_id != document.run_id:
        raise IngestError(f"run_id: job {job.id} belongs to run {job.run_id}, not {document.run_id}")
    if run.repository.name != document.repository:
        raise IngestError(f"repository: run {run.id} is of {run.repository.name}, not {document.repository}")
    if run.commit.sha != document.commit:
        raise IngestError(f"commit: run {run.id} is of commit {run.commit.sha}, not {document.commit}")
    if job.device_class.name != document.device.device_class:
        raise IngestError(
            f"device.device_class: job {job.id} runs on {job.device_class.name}, not {document.device.device_class}")
    wanted = list(dict.fromkeys(r.case for r in document.results))
    # keyed by text: the documents' ids are their text
    case_ids = {str(case_id): case_pk for case_id, case_pk in session.execute(
        sa.select(Case.case_id, Case.id).where(Case.case_id.in_(wanted)))}
    unknown = [(i, r.case) for i, r in enumerate(document.results) if r.case not in case_ids]
    if unknown:
        i, case = unknown[0]
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise IngestError(f"results.{i}.case: unknown case {case}{more}; ingest the bundle manifest that builds it first")
    targets = set(job.device_class.targets)
    foreign = [(i, r) for i, r in enumerate(document.results) if r.target not in targets]
    # skipped rows may be entries of the bundle's other targets (an agent reports every entry; they hold no
    # timing): those a bundle built, the job's own (or, without one, one of the run's commit: local runs)
    skipped_foreign = any(r.status == "skipped" for _, r in foreign)
    built = _built(session, job, run) if job.bundle_digest is not None or skipped_foreign else set()
    for i, r in foreign:
        if r.status != "skipped" or (r.case, r.target) not in built:
            raise IngestError(f"results.{i}.target: {r.target} is not a target of device class {job.device_class.name} "
                              f"({', '.join(sorted(targets))})" + (" and no bundle of the job built it"
                                                                    if r.status == "skipped" else ""))
    if job.bundle_digest is not None:   # only what the job's bundle built (imports and local runs have none)
        if built:
            outside = [(i, r) for i, r in enumerate(document.results) if (r.case, r.target) not in built]
            if outside:
                i, r = outside[0]
                raise IngestError(f"results.{i}: {r.case} on {r.target} is not in the job's bundle "
                                  f"{job.bundle_digest[:12]}")
    _check_device(session, document.device.uid, job)
    return job, run, case_ids


def _built(session: Session, job: Job, run: Run) -> set[tuple[str, str]]:
    """(case id, target) of what the job's bundle built; without one, what the bundles of the run's commit built."""
    where = Bundle.digest == job.bundle_digest if job.bundle_digest is not None else Bundle.commit_id == run.commit_id
    return {(str(case_id), target) for case_id, target in session.execute(
        sa.select(Case.case_id, CompileStat.target).join(CompileStat, CompileStat.case_id == Case.id)
        .join(Bundle, CompileStat.bundle_id == Bundle.id).where(where))}


def _check_device(session: Session, uid: str, job: Job) -> None:
    """A device of another class is named only by the agent it is registered to (which re-maps its
    devices between classes), or when no agent holds it (local runs): another agent's GPU is never
    written into a job of some other class."""
    found = session.execute(sa.select(Device.device_class_id, Agent.name, DeviceClassRow.name)
                            .join(DeviceClassRow, Device.device_class_id == DeviceClassRow.id)
                            .join(Agent, Device.agent_id == Agent.id).where(Device.uid == uid)).first()
    if found is None:
        return
    class_id, owner, class_name = found
    if class_id != job.device_class_id and owner != (job.lease_owner or job.agent):
        raise IngestError(f"device.uid: device {uid} is agent {owner}'s, of device class {class_name}, not "
                          f"{job.device_class.name}")


def _series(session: Session, case_pks: set[int], device_class_id: int, metric: str = LATENCY) -> dict[int, int]:
    """cases.id -> series.id of the metric's series on that device class, created when missing."""
    if not case_pks:
        return {}

    def found() -> dict[int, int]:
        return dict(session.execute(
            sa.select(Series.case_id, Series.id).where(
                Series.case_id.in_(case_pks), Series.device_class_id == device_class_id, Series.metric == metric)
        ).all())

    series = found()  # after a suite's first upload, every series exists: one query
    missing = sorted(case_pks - series.keys())
    if not missing:
        return series
    rows = [{"case_id": c, "device_class_id": device_class_id, "metric": metric} for c in missing]
    _insert_ignoring_conflicts(session, Series.__table__, rows, ["case_id", "device_class_id", "metric"])
    return found()


def _counter_rows(session: Session, ok: Sequence[tuple[int, CaseResult]], case_ids: dict[str, int],
                  device_class_id: int, commit_id: int, paired_ids: dict[str, int]) -> list[dict[str, Any]]:
    """The counter_values rows of the ok results' counters and their paired bases' (module
    `pipeline.contracts.counters`), each in its counter's series; the base's under the base commit."""
    wanted: dict[str, set[int]] = {}
    for _, r in ok:
        for counters in (r.counters, r.paired_base.counters if r.paired_base is not None else None):
            for name in counters.values if counters is not None else {}:
                wanted.setdefault(name, set()).add(case_ids[r.case])
    series = {name: _series(session, cases, device_class_id, name) for name, cases in sorted(wanted.items())}
    rows = []
    for result_id, r in ok:
        sides = [(False, commit_id, r.counters)]
        if r.paired_base is not None:
            sides.append((True, paired_ids[r.paired_base.commit], r.paired_base.counters))
        for base, commit, counters in sides:
            if counters is None:
                continue
            rows += [{"case_result_id": result_id, "series_id": series[name][case_ids[r.case]], "commit_id": commit,
                      "base": base, "value": value, "profiler": counters.profiler}
                     for name, value in sorted(counters.values.items())]
    return rows


def ingest_result(
    session: Session, *, document: ResultDocument, analysis: AnalysisSettings | None
) -> IngestSummary:
    """Store what an agent measured for one job; idempotent on (job, case, target).

    Refused (IngestError, nothing written): an unknown job, a job of another run, a commit,
    repository or device class other than the run's, a case no manifest registered. A result
    already stored for its (job, case, target) is skipped and counted as a duplicate.

    ok results get a measurement in the case's latency series (statistics recomputed from the
    samples, which are the source of truth) holding every sample and its clock as arrays, and their
    hardware counters (and their paired bases') one value each in the counter's series; wrong /
    error / skipped results store the case result only. Rows go in with bulk inserts. A result with
    a `paired_base` records the base commit (which must be recorded) and its samples beside.

    Then, when new ok results were stored, `analysis.analyze_after_ingest` looks for change points
    in the series they touched (push, nightly and local runs, and commits on the default branch),
    with `analysis` settings, and learns their run-to-run noise; `analysis.learn_paired_noise` the
    paired noise of those with new A/A calibrations (any run). None skips both.
    """
    job, run, case_ids = _check_document(session, document)

    stored_keys = set(session.execute(
        sa.select(CaseResultRow.case_id, CaseResultRow.target).where(CaseResultRow.job_id == job.id)).all())
    new = [r for r in document.results if (case_ids[r.case], r.target) not in stored_keys]
    duplicates = len(document.results) - len(new)
    if not new:  # a retried upload: nothing at all is written, not even the device's last_seen
        return IngestSummary(stored=0, duplicates=duplicates, samples=0)
    paired_commits = {r.paired_base.commit for r in new if r.paired_base is not None}
    paired_ids = {sha: _commit(session, run.repository, sha, field="results.paired_base.commit").id
                  for sha in sorted(paired_commits)}
    device = upsert_device(session, info=document.device)

    result_rows = [{
        "job_id": job.id, "case_id": case_ids[r.case], "target": r.target, "status": r.status, "reason": r.reason,
        "max_abs_error": r.correctness.max_abs_error if r.correctness else None,
        "max_rel_error": r.correctness.max_rel_error if r.correctness else None,
        "device_id": device.id,
        "paired_base_commit_id": paired_ids[r.paired_base.commit] if r.paired_base is not None else None,
        "paired_samples": to_blob(r.paired_base.samples) if r.paired_base is not None else None,
        "binary_digest": r.binary_digest,
        "paired_binary_digest": r.paired_base.binary_digest if r.paired_base is not None else None,
        "code_digest": r.code_digest,
        "paired_code_digest": r.paired_base.code_digest if r.paired_base is not None else None,
        "environment": r.environment or None,
    } for r in new]
    result_ids = _insert_returning_ids(session, CaseResultRow.__table__, result_rows)
    if document.environment:
        job.environment = dict(document.environment)

    ok = [(result_id, r) for result_id, r in zip(result_ids, new, strict=True) if r.status == "ok"]
    if not ok:
        return IngestSummary(stored=len(new), duplicates=duplicates, samples=0)
    series = _series(session, {case_ids[r.case] for _, r in ok}, job.device_class_id)
    measurement_rows = []
    for result_id, r in ok:
        s = summarize(r.samples)
        measurement_rows.append({
            "case_result_id": result_id, "series_id": series[case_ids[r.case]], "commit_id": run.commit_id,
            "n": s.n, "median": s.median, "mean": s.mean, "stdev": s.stdev, "min": s.min, "max": s.max,
            "round_sizes": r.rounds, "samples": to_blob(r.samples),
            "sample_clocks": to_blob(r.sample_clocks_mhz) if r.sample_clocks_mhz is not None else None,
        })
    _bulk_insert(session, Measurement.__table__, measurement_rows)
    _bulk_insert(session, CounterValue.__table__,
                 _counter_rows(session, ok, case_ids, job.device_class_id, run.commit_id, paired_ids))
    if analysis is not None:
        analyze_after_ingest(session, document, analysis)
        if any(r.paired_base is not None and r.binary_digest is not None
               and r.binary_digest == r.paired_base.binary_digest for _, r in ok):
            learn_paired_noise(session, job.id)
    return IngestSummary(stored=len(new), duplicates=duplicates, samples=sum(len(r.samples) for _, r in ok))


# --- bulk writes ------------------------------------------------------------------------------
# A result document of a full suite is thousands of case results (each ok one holding its samples
# as one array: millions of samples are a few thousand column values).
# On PostgreSQL they go in through COPY on the session's own connection (same transaction): no
# statement to build or parse, one round trip per table. Ids of rows that others point to are
# drawn from the table's sequence first (one query), so that COPY can write them. SQLite gets
# executemany INSERTs (RETURNING the ids where needed).


def _insert_returning_ids(session: Session, table: sa.Table, rows: list[dict[str, Any]]) -> list[int]:
    """Insert rows into a table with an integer `id` key; returns their ids in row order."""
    if not rows:
        return []
    if session.get_bind().dialect.name != "postgresql":
        return list(session.scalars(
            sa.insert(table).returning(table.c.id, sort_by_parameter_order=True), rows).all())
    ids = list(session.scalars(
        sa.text("SELECT nextval(pg_get_serial_sequence(:table, 'id')) FROM generate_series(1, :n)"),
        {"table": table.name, "n": len(rows)}).all())
    for row, row_id in zip(rows, ids, strict=True):
        row["id"] = row_id
    _bulk_insert(session, table, rows)
    return ids


def _bulk_insert(session: Session, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """Insert rows (all with the same keys): COPY on PostgreSQL, executemany INSERT elsewhere."""
    if not rows:
        return
    connection = session.connection()
    if connection.dialect.name != "postgresql":
        session.execute(sa.insert(table), rows)
        return
    driver_connection = connection.connection.driver_connection
    if driver_connection is None:
        raise RuntimeError("the session's PostgreSQL connection is closed")
    columns = list(rows[0])
    for name in columns:  # names come from code, never from documents; checked all the same
        if name not in table.c:
            raise ValueError(f"{table.name} has no column {name!r}")
    # COPY writes a Python list as a PostgreSQL array literal ({3,3}); a JSON column wants JSON text
    as_json = {c for c in columns if isinstance(table.c[c].type, sa.JSON)}
    statement = f"COPY {table.name} ({', '.join(columns)}) FROM STDIN"
    with driver_connection.cursor() as cursor, cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row(tuple(json.dumps(row[c]) if c in as_json and row[c] is not None else row[c]
                                 for c in columns))
