"""Ad-hoc runs and the service's builder: queue a commit's jobs, reuse its bundle or build one.

`queue_run` (pure, over a Session) makes an ad-hoc run with one job per device class; when a
bundle of that commit covering the classes' targets is known the jobs get it at once (claimable),
otherwise a build request waits for `Builder`, a thread of the service that builds the commit
from the suite checkout it was given (`dispatch.suite_path`; `benchfarm up` passes its suite),
ingests the manifest and hands the digest to the jobs, renewing the build's heartbeat meanwhile.
`Reaper`, another thread, requeues jobs whose lease expired and builds whose builder went silent
for as long, and marks silent agents offline.

Paired runs (a pull request: `base_sha` given): each job runs the head's bundle and the base's,
interleaved on its device. The base's bundle is reused when one covering the targets is known,
else the builder builds it after the head's; the jobs get `bundle_digest` and
`base_bundle_digest` together, and only then are they claimable.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from datetime import UTC, datetime

from pipeline.config import Settings
from pipeline.loops import Loop
from pipeline.progress import ProgressLines
from pipeline.results.store import builds, commit_refs, commits, ingest, queue, runs, series
from pipeline.results.store.db import Engine, Session, session_scope

log = logging.getLogger(__name__)

__all__ = ["Builder", "Nightly", "Reaper", "TriggerError", "TriggerResult", "find_bundle", "queue_run",
           "resolve_commit_for_trigger"]


class TriggerError(ValueError):
    """A trigger the service cannot take; the message names the field."""


@dataclass(frozen=True)
class TriggerResult:
    run_id: str
    repository: str
    commit: str
    job_ids: dict[str, str]
    bundle_digest: str | None   # None: a build was requested
    base_sha: str | None = None
    base_bundle_digest: str | None = None


def _manifest_targets(path: str) -> set[str] | None:
    from pipeline.build.bundle import load_bundle

    try:
        manifest = load_bundle(Path(path))
    except (OSError, ValueError):
        return None
    return set(manifest.targets)


def find_bundle(bundles: Sequence[tuple[str, str]], targets: set[str]) -> str | None:
    """The first of `bundles` ((digest, path) of a commit's, newest first: `builds.bundles_of`) whose
    files the service has and whose entries cover `targets`."""
    for digest, path in bundles:
        have = _manifest_targets(path)
        if have is not None and targets <= have:
            return digest
    return None


def resolve_commit_for_trigger(session: Session, settings: Settings, *, repository: str | None, ref: str | None,
                               commit: str | None) -> tuple[str, str]:
    """(repository, full sha) of a trigger. With a suite checkout (`dispatch.suite_path`) a ref or
    sha is resolved there and the commit's history recorded; without one, the commit must be known."""
    if bool(ref) == bool(commit):
        raise TriggerError("ref / commit: give exactly one")
    if settings.dispatch.suite_path:
        from pipeline.build.suite_loader import (
            SuiteError,
            commit_history,
            locate_suite,
            resolve_commit,
        )

        location = locate_suite(Path(settings.dispatch.suite_path))
        try:
            sha = resolve_commit(location, ref or commit or "HEAD")
        except (SuiteError, RuntimeError) as exc:
            raise TriggerError(f"{'ref' if ref else 'commit'}: {exc}") from None
        repo = repository or settings.repository or location.repository
        ingest.record_commits(session, repository=repo, commits=commit_history(location, sha))
        return repo, sha
    if not commit:
        raise TriggerError("ref: the service has no suite checkout (dispatch.suite_path) to resolve it; give a commit")
    try:
        return commit_refs.resolve_commit(session, commit, repository=repository or None)
    except commit_refs.CommitRefError as exc:
        raise TriggerError(f"commit: {exc}") from None


def queue_run(
    session: Session, *, repository: str, commit_sha: str, device_classes: Sequence[str], cases: str | None,
    max_attempts: int, extra_targets: Sequence[str] = (), can_build: bool = True, kind: str = "adhoc",
    base_sha: str | None = None, created_at: datetime | None = None,
) -> TriggerResult:
    """A run of a recorded commit: one queued job per device class, claimable at once when a bundle
    covering the classes' targets exists, else after the builder made one. With `base_sha` (a
    recorded commit) the jobs are paired: the base's bundle is reused or built too (module doc).
    `created_at`: when the run was queued, by the caller's clock (default now)."""
    registered = series.registered_targets(session, device_classes)
    unknown = [c for c in device_classes if c not in registered]
    if unknown:
        raise TriggerError(f"device_classes: no agent has registered {', '.join(unknown)}")
    targets = {t for listed in registered.values() for t in listed} | set(extra_targets)
    run = runs.queue_run(session, repository=repository, commit_sha=commit_sha, kind=kind,
                         device_classes=device_classes, cases=cases, max_attempts=max_attempts, created_at=created_at)
    digest = find_bundle(builds.bundles_of(session, repository=repository, sha=commit_sha) or [], targets)
    base_digest = None
    if base_sha is not None:
        base_bundles = builds.bundles_of(session, repository=repository, sha=base_sha)
        if base_bundles is None:
            raise TriggerError(f"base_sha: {base_sha} is not a recorded commit of {repository}")
        base_digest = find_bundle(base_bundles, targets)
    missing = digest is None or (base_sha is not None and base_digest is None)
    if missing and not can_build:
        raise TriggerError(f"commit: no bundle of {commit_sha[:10]}{' or its base' if base_sha else ''} covers "
                           f"{', '.join(sorted(targets))}, and the service has no suite checkout to build one "
                           "(dispatch.suite_path)")
    if missing:
        builds.request_build(session, run_id=run.run_id, targets=sorted(targets), base_sha=base_sha)
    else:
        assert digest is not None
        builds.give_bundles(session, run_id=run.run_id, digest=digest, base_digest=base_digest)
    return TriggerResult(run_id=run.run_id, repository=repository, commit=commit_sha, job_ids=run.job_ids,
                         bundle_digest=None if missing else digest, base_sha=base_sha,
                         base_bundle_digest=None if missing else base_digest)


# --- the service's threads ---------------------------------------------------------------------


class Reaper(Loop):
    """Requeues jobs whose lease expired; marks agents that stopped heartbeating offline."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        super().__init__("dispatch-reaper", max(0.2, min(settings.dispatch.lease_s / 4, 5.0)))
        self.settings, self.engine = settings, engine

    def step(self) -> bool:
        with session_scope(self.engine) as session:
            for job_id, status in queue.requeue_expired(session):
                log.warning("job %s: lease expired, now %s", job_id, status)
            for name in queue.mark_silent_agents_offline(session, silent_s=self.settings.dispatch.agent_offline_s):
                log.warning("agent %s: no heartbeat for %.0f s, offline", name, self.settings.dispatch.agent_offline_s)
            for build_id, run_id in builds.requeue_silent_builds(session, silent_s=self.settings.dispatch.lease_s):
                log.warning("build %s of run %s: its builder was silent for %.0f s, queued again", build_id, run_id,
                            self.settings.dispatch.lease_s)
        return False


class Builder(Loop):
    """Builds the bundles of triggered runs from the suite checkout, one at a time: a thread of the
    service, or the loop of a `benchfarm builder` process (several may share a store: a request is
    taken by one update that only one of them wins)."""

    def __init__(self, settings: Settings, engine: Engine, *, suite: Path) -> None:
        super().__init__("dispatch-builder", 0.5)
        self.settings, self.engine, self.suite = settings, engine, suite


    def _beat(self, build_id: int, done: threading.Event) -> None:
        """Renew the build's heartbeat until `done` (a thread of its own: a build may wait for the host
        lock or compile for minutes)."""
        while not done.wait(max(0.2, self.settings.dispatch.lease_s / 4)):
            try:
                with session_scope(self.engine) as session:
                    builds.beat(session, build_id)
            except Exception:   # noqa: BLE001 - a missed beat is retried; the lease allows several
                log.exception("build %s: heartbeat failed", build_id)

    def step(self) -> bool:
        from pipeline.build.bundle import build_bundle
        from pipeline.build.suite_loader import locate_suite

        with session_scope(self.engine) as session:
            taken = builds.take_pending(session)
        if taken is None:
            return False
        build_id, repository, sha, targets, base_sha = taken.id, taken.repository, taken.sha, taken.targets, taken.base_sha
        done = threading.Event()
        beats = threading.Thread(target=self._beat, args=(build_id, done), name=f"build-{build_id}-heartbeat",
                                 daemon=True)
        beats.start()
        try:
            digests = []
            for commit in (sha, base_sha) if base_sha else (sha,):
                with session_scope(self.engine) as session:
                    known = find_bundle(builds.bundles_of(session, repository=repository, sha=commit) or [],
                                        set(targets))
                if known is not None:
                    digests.append(known)
                    continue
                log.info("building %s@%s for %s", repository, commit[:10], ", ".join(targets))

                def report(what: str, done: int, total: int, commit: str = commit) -> None:
                    log.info("build of %s: %s (%d/%d)", commit[:10], what, done, total)
                progress = ProgressLines(report)
                bundle_dir, manifest = build_bundle(
                    location=locate_suite(self.suite), sha=commit, targets=targets, out_dir=self.settings.bundles_dir,
                    cache_dir=self.settings.cache_dir, workers=self.settings.build_workers, repository=repository,
                    host_lock=self.settings.measurement.host_lock, progress=progress)
                with session_scope(self.engine) as session:
                    digests.append(ingest.ingest_manifest(session, manifest=manifest,
                                                          path=str(Path(bundle_dir).resolve()),
                                                          bundle_dir=Path(bundle_dir)))
            with session_scope(self.engine) as session:
                builds.finish_build(session, build_id=build_id, digest=digests[0],
                                    base_digest=digests[1] if base_sha else None)
        except (KeyboardInterrupt, SystemExit):
            # this builder stops (Ctrl-C, SIGTERM): the request goes back to wait for the next builder
            with session_scope(self.engine) as session:
                builds.release(session, build_id)
            raise
        except Exception as exc:
            log.exception("build of %s failed", sha[:10])
            with session_scope(self.engine) as session:
                builds.fail_build(session, build_id=build_id, error=f"build failed: {exc}")
        finally:
            done.set()
            beats.join()
        return True


class Nightly(Loop):
    """Once a day at `dispatch.nightly_at` (UTC): a run of the whole suite on every device class an
    agent has registered, of `dispatch.nightly_ref` in the suite checkout, or, without one, of the
    stored default-branch head; the history feeds from it. A nightly run already queued since
    today's time is not queued again (restarts, several service processes)."""

    def __init__(self, settings: Settings, engine: Engine, clock: Callable[[], datetime] | None = None,
                 period_s: float = 30.0) -> None:
        super().__init__("nightly", period_s)
        self.settings, self.engine = settings, engine
        self.clock = clock or (lambda: datetime.now(UTC))

    def step(self) -> bool:
        at = self.settings.dispatch.nightly_at
        if not at:
            return False
        now = self.clock()
        hour, minute = (int(part) for part in at.split(":"))
        due = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if now < due:
            return False
        with session_scope(self.engine) as session:
            if builds.nightly_queued_since(session, due):
                return False
            classes = series.device_class_names(session)
            if not classes:
                log.info("nightly: no device class registered yet")
                return False
            repository, sha = self._head(session)
            # the run is dated by the scheduler's clock, which the check above compares with
            result = queue_run(session, repository=repository, commit_sha=sha, device_classes=classes, cases=None,
                               max_attempts=self.settings.dispatch.max_attempts,
                               extra_targets=self.settings.dispatch.build_targets, kind="nightly", created_at=now)
        log.info("nightly run %s of %s@%s on %s", result.run_id, repository, sha[:10], ", ".join(classes))
        return False

    def _head(self, session: Session) -> tuple[str, str]:
        if self.settings.dispatch.suite_path:
            return resolve_commit_for_trigger(session, self.settings, repository=None,
                                              ref=self.settings.dispatch.nightly_ref, commit=None)
        head = commits.default_branch_head_of(session, self.settings.repository or None)
        if head is None:
            raise TriggerError("nightly: no suite checkout and no stored default-branch head to run")
        return head
