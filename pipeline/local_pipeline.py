"""The whole pipeline on one machine: build the suite at a commit, run it on local devices, store, compare.

`benchfarm run` calls `run_pipeline` in the foreground, with no service (`benchfarm up` does not:
its in-process agent claims jobs from the service over HTTP, as `benchfarm agent` does). Each stage
writes its state to the store (run and job status), so a failure or a Ctrl-C is recorded with its
reason and nothing half-ingested is left behind (each ingest is one transaction).
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable, Sequence, Sized
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.agents.check_cache import CheckCache
from pipeline.agents.counters import CounterCache
from pipeline.agents.devices import LocalDevice, discover_local_devices, plan_targets
from pipeline.agents.local import run_bundle
from pipeline.build.bundle import ALL_TARGETS, build_bundle, load_bundle
from pipeline.build.suite_api import KernelCase
from pipeline.build.suite_loader import (
    SuiteError,
    SuiteLocation,
    changed_suite_files,
    commit_history,
    locate_suite,
    on_first_parent_line,
    resolve_commit,
    suite_cases,
)
from pipeline.config import Settings
from pipeline.contracts.ids import CaseId, Target, selects_case
from pipeline.progress import ProgressFn
from pipeline.results.store import ingest, queue, runs
from pipeline.results.store.compare import ComparisonOut, choose_base, compare, decision_rule, only_cases
from pipeline.results.store.compile_stats import CompileComparisonOut, compare_compile
from pipeline.results.store.db import Engine, session_scope

log = logging.getLogger(__name__)


class PipelineError(RuntimeError):
    """A stage could not proceed; the message says which and why."""


class CasesRefused(PipelineError):
    """The run selects no case a local device runs: refused before anything is stored; the message
    names what the suite has and for which targets."""


class RunCancelled(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during a run: the run's unfinished jobs were recorded as failed, "cancelled"."""


CANCELLED_REASON = "cancelled: interrupted ({how}) while the job was {stage}"


@dataclass(frozen=True)
class NotRunHere:
    """The selected cases that no local device runs (their targets are another machine's): not built
    or run here, said so rather than left out silently (issue 34: a Triton edit on a CPU-only host)."""

    cases: dict[str, tuple[str, ...]]
    """case id -> the target patterns it supports"""
    edited: list[str] = field(default_factory=list)
    """those whose source files (`KernelCase.source_files`) changed since `base`"""
    base: str | None = None
    """the commit the run is compared with"""

    def describe(self, glob: str | None) -> str:
        """A few lines: how many, grouped by family and implementation with their targets; those whose
        files changed since the base; what would build or run them."""
        groups: dict[str, tuple[int, set[str]]] = {}
        for case, patterns in sorted(self.cases.items()):
            case_id = CaseId.parse(case)
            key = f"{case_id.family}/*/{case_id.impl}"   # a glob naming the group
            count, targets = groups.get(key, (0, set()))
            groups[key] = (count + 1, targets | set(patterns))
        what = f"of {glob!r} " if glob else ""
        lines = [f"not built or run here: {len(self.cases)} case{_s(self.cases)} {what}for targets no device here "
                 "runs: " + ", ".join(f"{n} {key} ({', '.join(sorted(t))})" for key, (n, t) in groups.items())]
        if self.edited and self.base:
            lines.append(f"{len(self.edited)} of them {'has' if len(self.edited) == 1 else 'have'} files changed since "
                         f"{self.base[:10]} (the base): {_some(self.edited, 3)}")
        lines.append(_elsewhere_hint({p for patterns in self.cases.values() for p in patterns}) + ".")
        return "\n".join(lines)


def _s(items: Sized) -> str:
    return "" if len(items) == 1 else "s"


def _some(names: Sequence[str], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (f", … ({len(names) - shown} more)" if len(names) > shown else "")


def _elsewhere_hint(patterns: Iterable[str]) -> str:
    """Where cases for other targets run, and how to build them here."""
    buildable = [t for t in ALL_TARGETS if any(fnmatch.fnmatchcase(t, p) for p in patterns)]
    named = ",".join(buildable) if 0 < len(buildable) <= 3 else "all"
    return ("A host with such a device runs them (`benchfarm trigger` on a farm); "
            f"`benchfarm build --targets {named}` builds them here")


def _cases_for_other_targets(location: SuiteLocation, sha: str, chosen: Sequence[str],
                             glob: str | None) -> list[KernelCase]:
    """The cases `glob` selects (None: all) that support none of the `chosen` targets. Raises
    CasesRefused when it selects no case, or none that a local device runs: refused before
    anything is stored, naming what the suite has for other targets."""
    cases = suite_cases(location, sha)
    selected = [c for c in cases if selects_case(glob, str(c.case_id))]
    what = f"--cases {glob!r} selects" if glob else f"the suite at {sha[:10]} has"
    if not selected:
        raise CasesRefused(f"{what} none of the {len(cases)} cases ({_some(sorted(str(c.case_id) for c in cases))})")
    targets = [Target.parse(t) for t in chosen]
    elsewhere = [c for c in selected if not any(c.supports(t) for t in targets)]
    if len(elsewhere) == len(selected):
        patterns = sorted({p for c in elsewhere for p in c.targets})
        raise CasesRefused(
            f"{what} {len(selected)} case{_s(selected)}, none for this machine's targets ({', '.join(chosen)}): "
            f"they are for {', '.join(patterns)} ({_some(sorted(str(c.case_id) for c in elsewhere))}). "
            f"{_elsewhere_hint(patterns)}")
    return elsewhere


@dataclass
class PipelineOutcome:
    run_id: str
    sha: str
    repository: str
    comparisons: list[ComparisonOut] = field(default_factory=list)
    failed_jobs: dict[str, str] = field(default_factory=dict)
    compiled: CompileComparisonOut | None = None
    """The bundle's compile statistics against the latency comparisons' base (beside them, not in them)."""
    not_run_here: NotRunHere | None = None


def _log_progress(description: str, done: int, total: int) -> None:
    """Progress for a log, not a terminal: a line as each stage starts and ends, the rest at debug."""
    log.log(logging.INFO if done in (1, total) else logging.DEBUG, "%s (%d/%d)", description, done, total)


def repository_name(settings: Settings, location: SuiteLocation) -> str:
    return settings.repository or location.repository


def run_pipeline(
    *,
    settings: Settings,
    engine: Engine,
    suite: Path,
    ref: str = "HEAD",
    targets: Sequence[str] | None = None,
    devices: Sequence[LocalDevice] | None = None,
    progress: ProgressFn = _log_progress,
    paired: bool = True,
    cases: str | None = None,
) -> PipelineOutcome:
    """Build, run, store and compare. `paired`: where the base commit's bundle for the same targets is
    still under `settings.bundles_dir`, each device times head interleaved with it (`paired_base`).
    `cases`: a glob over case ids; only those are run (the whole suite is built: it is cached). The
    selected cases no local device runs are named in `not_run_here`; when that is all of them,
    CasesRefused before anything is stored."""
    location = locate_suite(suite)
    sha = resolve_commit(location, ref)
    devices = list(devices) if devices is not None else discover_local_devices(settings.phones)
    chosen = plan_targets(devices, targets)
    devices = [d for d in devices if set(d.device_class.targets) & set(chosen)]
    if not devices:
        raise PipelineError("no local device can run any of the chosen targets")
    repo = repository_name(settings, location)
    # before the run is stored: a --cases that selects nothing runnable here is refused, nothing recorded
    elsewhere = _cases_for_other_targets(location, sha, chosen, cases)

    with session_scope(engine) as session:
        reaped = queue.reap_orphaned_local_jobs(session)
        if reaped:
            log.warning("failed %d job(s) left unfinished by benchfarm processes that are gone", len(reaped))
        ingest.record_commits(session, repository=repo, commits=commit_history(location, sha))
        for device in devices:
            ingest.upsert_device_class(session, device.device_class)
            ingest.upsert_device(session, info=device.info)
        # the checkout's line of history feeds the default-branch history (`history`); a working tree
        # or another branch's commit is an ad-hoc run: compared and browsable, not history
        kind = "local" if on_first_parent_line(location, sha) else "adhoc"
        run = runs.queue_run(session, repository=repo, commit_sha=sha, kind=kind,
                             device_classes=[d.device_class.name for d in devices], owner=queue.local_owner())
        run_id, jobs = run.run_id, run.job_ids
    outcome = PipelineOutcome(run_id=run_id, sha=sha, repository=repo)
    log.info("run %s: %s at %s on %s", run_id, repo, sha[:10], ", ".join(jobs))
    stage = ["waiting for its build"]
    try:
        _build_and_run(settings, engine, location=location, sha=sha, repo=repo, chosen=chosen, devices=devices,
                       jobs=jobs, outcome=outcome, progress=progress, paired=paired, stage=stage, cases=cases)
    except KeyboardInterrupt as interrupt:
        how = str(interrupt) or "Ctrl-C"   # SIGTERM says so (`cli.common.sigterm_as_interrupt`)
        with session_scope(engine) as session:
            runs.fail_unfinished(session, jobs.values(), error=CANCELLED_REASON.format(how=how, stage=stage[0]))
        raise RunCancelled(f"run {run_id} cancelled; its unfinished jobs are recorded as failed") from None
    with session_scope(engine) as session:
        outcome.compiled = compare_compile(session, repo, head_sha=sha,
                                           latency_bases=(c.base_sha for c in outcome.comparisons),
                                           walk=settings.compare.ancestor_walk)
    if elsewhere:
        outcome.not_run_here = _not_run_here(location, sha, elsewhere, outcome.comparisons)
    return outcome


def _not_run_here(location: SuiteLocation, sha: str, elsewhere: Sequence[KernelCase],
                  comparisons: Sequence[ComparisonOut]) -> NotRunHere:
    """What to say of the cases for other targets; the edited ones by the files changed since the base."""
    base = next((c.base_sha for c in comparisons if c.base_sha and c.base_sha != sha), None)
    changed: set[str] = set()
    if base is not None:
        try:
            changed = changed_suite_files(location, base, sha)
        except SuiteError:   # a base this checkout does not have (results imported from elsewhere)
            base = None
    return NotRunHere(cases={str(c.case_id): tuple(c.targets) for c in elsewhere},
                      edited=sorted(str(c.case_id) for c in elsewhere if changed & set(c.source_files)), base=base)


def _build_and_run(settings: Settings, engine: Engine, *, location: SuiteLocation, sha: str, repo: str,
                   chosen: Sequence[str], devices: Sequence[LocalDevice], jobs: dict[str, str],
                   outcome: PipelineOutcome, progress: ProgressFn, paired: bool, stage: list[str],
                   cases: str | None) -> None:
    """The stages after the run is recorded; `stage[0]` says where a job waits (for an interrupt)."""
    run_id = outcome.run_id
    try:
        bundle_dir, manifest = build_bundle(
            location=location, sha=sha, targets=chosen, out_dir=settings.bundles_dir,
            cache_dir=settings.cache_dir, workers=settings.build_workers, progress=progress, repository=repo,
            host_lock=settings.measurement.host_lock,
        )
        with session_scope(engine) as session:
            ingest.ingest_manifest(session, manifest=manifest, path=str(bundle_dir), bundle_dir=Path(bundle_dir))
    except Exception as exc:
        _fail_jobs(engine, jobs.values(), f"build failed: {exc}")
        raise PipelineError(f"build of {sha[:10]} failed: {exc}") from exc
    if cases:   # it selects some of these: `_cases_for_other_targets` checked before the run was stored
        manifest = manifest.model_copy(update={"entries": [e for e in manifest.entries if selects_case(cases, e.case)]})

    stage[0] = "waiting for its device"
    for device in devices:
        job_id = jobs[device.device_class.name]
        with session_scope(engine) as session:
            ingest.set_job_status(session, job_id=job_id, status="running", agent="embedded")
        stage[0] = "running"
        try:
            base_dir = _base_bundle(engine, settings, repo, sha, device, bundle_dir) if paired else None
            with session_scope(engine) as session:
                rule = decision_rule(session, device_class=device.device_class.name, settings=settings.compare).rule()
            document = run_bundle(
                bundle_dir=bundle_dir, manifest=manifest, device=device, run_id=run_id, job_id=job_id,
                settings=settings.measurement, progress=progress,
                base_bundle_dir=base_dir, base_manifest=load_bundle(base_dir) if base_dir else None,
                check_cache=CheckCache(settings.agent_dir / "checked"), rule=rule,
                counter_cache=CounterCache(settings.agent_dir / "counters"),
            )
            with session_scope(engine) as session:
                ingest.ingest_result(session, document=document, analysis=settings.analysis)
                ingest.set_job_status(session, job_id=job_id, status="done")
        except Exception as exc:  # a failed job is recorded with its reason; the others go on
            log.exception("job %s on %s failed", job_id, device.device_class.name)
            _fail_jobs(engine, [job_id], str(exc))
            outcome.failed_jobs[device.device_class.name] = str(exc)
            continue
        with session_scope(engine) as session:
            comparison = compare(session, repository=repo, head_sha=sha, device_class=device.device_class.name,
                                 settings=settings.compare, run_id=run_id)
        # with --cases, the rows of what this run ran: the commit's other cases (an earlier run's) are
        # not news, and the run page shows the same cut
        ran = {CaseId.parse(e.case) for e in manifest.entries}
        outcome.comparisons.append(only_cases(comparison, ran) if cases else comparison)
        stage[0] = "waiting for its device"


def _base_bundle(engine: Engine, settings: Settings, repository: str, sha: str, device: LocalDevice,
                 bundle_dir: Path) -> Path | None:
    """The bundle of head's base on this device class (the newest first-parent ancestor with results
    there, as `compare` chooses it) built for the same targets and compilers, when it is still under
    bundles_dir (bundle names: `<sha12>-<suite digest12>-<targets+compilers hash>`); else None."""
    with session_scope(engine) as session:
        base = choose_base(session, repository=repository, sha=sha, device_class=device.device_class.name,
                           walk=settings.compare.ancestor_walk).sha
    if base is None or base == sha:
        return None
    suffix = bundle_dir.name.rsplit("-", 1)[-1]
    found = sorted(p for p in bundle_dir.parent.glob(f"{base[:12]}-*-{suffix}") if (p / "manifest.json").is_file())
    return found[-1] if found else None


def _fail_jobs(engine: Engine, job_ids: Iterable[str], error: str) -> None:
    with session_scope(engine) as session:
        for job_id in job_ids:
            ingest.set_job_status(session, job_id=job_id, status="failed", error=error[:2000])
