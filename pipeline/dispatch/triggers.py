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
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from pipeline.config import Settings
from pipeline.loops import Loop
from pipeline.progress import ProgressLines
from pipeline.store import commit_refs, ingest, queue
from pipeline.store.db import session_scope
from pipeline.store.models import (
    BuildRequest,
    Bundle,
    Commit,
    DeviceClassRow,
    Job,
    Repository,
    Run,
    utcnow,
)

log = logging.getLogger(__name__)

__all__ = ["Builder", "Nightly", "Reaper", "TriggerError", "TriggerResult", "queue_run", "requeue_silent_builds",
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


def find_bundle(session: Session, *, commit_id: int, targets: set[str]) -> str | None:
    """The newest bundle of the commit whose files the service has and whose entries cover `targets`."""
    rows = session.execute(sa.select(Bundle.digest, Bundle.path).where(Bundle.commit_id == commit_id)
                           .order_by(Bundle.created_at.desc(), Bundle.id.desc())).all()
    for digest, path in rows:
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
    base_sha: str | None = None,
) -> TriggerResult:
    """A run of a recorded commit: one queued job per device class, claimable at once when a bundle
    covering the classes' targets exists, else after the builder made one. With `base_sha` (a
    recorded commit) the jobs are paired: the base's bundle is reused or built too (module doc)."""
    rows = {r.name: r for r in session.scalars(sa.select(DeviceClassRow).where(DeviceClassRow.name.in_(list(device_classes))))}
    unknown = [c for c in device_classes if c not in rows]
    if unknown:
        raise TriggerError(f"device_classes: no agent has registered {', '.join(unknown)}")
    targets = {t for r in rows.values() for t in r.targets} | set(extra_targets)
    run = ingest.create_run(session, repository=repository, commit_sha=commit_sha, kind=kind,
                            device_classes=list(device_classes))
    digest = find_bundle(session, commit_id=run.commit_id, targets=targets)
    base_digest = None
    if base_sha is not None:
        base_id = session.scalar(sa.select(Commit.id).where(Commit.repository_id == run.repository_id,
                                                             Commit.sha == base_sha))
        if base_id is None:
            raise TriggerError(f"base_sha: {base_sha} is not a recorded commit of {repository}")
        base_digest = find_bundle(session, commit_id=base_id, targets=targets)
    missing = digest is None or (base_sha is not None and base_digest is None)
    if missing and not can_build:
        raise TriggerError(f"commit: no bundle of {commit_sha[:10]}{' or its base' if base_sha else ''} covers "
                           f"{', '.join(sorted(targets))}, and the service has no suite checkout to build one "
                           "(dispatch.suite_path)")
    for job in run.jobs:
        job.cases, job.max_attempts = cases, max_attempts
        if not missing:
            job.bundle_digest, job.base_bundle_digest = digest, base_digest
    if missing:
        session.add(BuildRequest(run_id=run.id, targets=sorted(targets), status="pending", created_at=utcnow(),
                                 base_sha=base_sha))
    session.flush()
    return TriggerResult(run_id=run.id, repository=repository, commit=commit_sha,
                         job_ids={j.device_class.name: j.id for j in run.jobs}, bundle_digest=None if missing else digest,
                         base_sha=base_sha, base_bundle_digest=None if missing else base_digest)


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
            for build_id, run_id in requeue_silent_builds(session, silent_s=self.settings.dispatch.lease_s):
                log.warning("build %s of run %s: its builder was silent for %.0f s, queued again", build_id, run_id,
                            self.settings.dispatch.lease_s)
        return False


def requeue_silent_builds(session: Session, *, silent_s: float) -> list[tuple[int, str]]:
    """Builds whose builder stopped renewing their heartbeat (it died without putting them back) go
    back to pending; (build id, run id) of each."""
    cutoff = utcnow() - timedelta(seconds=silent_s)
    last = sa.func.coalesce(BuildRequest.heartbeat_at, BuildRequest.started_at)
    silent = [(build_id, run_id) for build_id, run_id in session.execute(
        sa.select(BuildRequest.id, BuildRequest.run_id).where(BuildRequest.status == "building", last < cutoff))]
    for build_id, _ in silent:
        session.execute(sa.update(BuildRequest).where(BuildRequest.id == build_id, BuildRequest.status == "building")
                        .values(status="pending", started_at=None, heartbeat_at=None))
    return silent


class Builder(Loop):
    """Builds the bundles of triggered runs from the suite checkout, one at a time: a thread of the
    service, or the loop of a `benchfarm builder` process (several may share a store: a request is
    taken by one update that only one of them wins)."""

    def __init__(self, settings: Settings, engine: Engine, *, suite: Path) -> None:
        super().__init__("dispatch-builder", 0.5)
        self.settings, self.engine, self.suite = settings, engine, suite

    def _take(self) -> tuple[int, str, str, list[str], str | None] | None:
        with session_scope(self.engine) as session:
            row = session.execute(
                sa.select(BuildRequest.id, Repository.name, Commit.sha, BuildRequest.targets, BuildRequest.base_sha)
                .join(Run, BuildRequest.run_id == Run.id).join(Repository, Run.repository_id == Repository.id)
                .join(Commit, Run.commit_id == Commit.id)
                .where(BuildRequest.status == "pending").order_by(BuildRequest.created_at).limit(1)).first()
            if row is None:
                return None
            won = queue.rowcount(session.execute(
                sa.update(BuildRequest).where(BuildRequest.id == row[0], BuildRequest.status == "pending")
                .values(status="building", started_at=utcnow(), heartbeat_at=utcnow())))
            return (row[0], row[1], row[2], list(row[3]), row[4]) if won == 1 else None

    def _beat(self, build_id: int, done: threading.Event) -> None:
        """Renew the build's heartbeat until `done` (a thread of its own: a build may wait for the host
        lock or compile for minutes)."""
        while not done.wait(max(0.2, self.settings.dispatch.lease_s / 4)):
            try:
                with session_scope(self.engine) as session:
                    session.execute(sa.update(BuildRequest)
                                    .where(BuildRequest.id == build_id, BuildRequest.status == "building")
                                    .values(heartbeat_at=utcnow()))
            except Exception:   # noqa: BLE001 - a missed beat is retried; the lease allows several
                log.exception("build %s: heartbeat failed", build_id)

    def step(self) -> bool:
        from pipeline.build.bundle import build_bundle
        from pipeline.build.suite_loader import locate_suite

        taken = self._take()
        if taken is None:
            return False
        build_id, repository, sha, targets, base_sha = taken
        done = threading.Event()
        beats = threading.Thread(target=self._beat, args=(build_id, done), name=f"build-{build_id}-heartbeat",
                                 daemon=True)
        beats.start()
        try:
            digests = []
            for commit in (sha, base_sha) if base_sha else (sha,):
                with session_scope(self.engine) as session:
                    commit_id = session.scalar(sa.select(Commit.id).join(Repository).where(
                        Repository.name == repository, Commit.sha == commit))
                    known = find_bundle(session, commit_id=commit_id, targets=set(targets)) if commit_id else None
                if known is not None:
                    digests.append(known)
                    continue
                log.info("building %s@%s for %s", repository, commit[:10], ", ".join(targets))
                progress = ProgressLines(lambda what, done, total, commit=commit: log.info(
                    "build of %s: %s (%d/%d)", commit[:10], what, done, total))
                bundle_dir, manifest = build_bundle(
                    location=locate_suite(self.suite), sha=commit, targets=targets, out_dir=self.settings.bundles_dir,
                    cache_dir=self.settings.cache_dir, workers=self.settings.build_workers, repository=repository,
                    host_lock=self.settings.measurement.host_lock, progress=progress)
                with session_scope(self.engine) as session:
                    digests.append(ingest.ingest_manifest(session, manifest=manifest,
                                                          path=str(Path(bundle_dir).resolve()),
                                                          bundle_dir=Path(bundle_dir)).digest)
            with session_scope(self.engine) as session:
                finish_build(session, build_id=build_id, digest=digests[0],
                             base_digest=digests[1] if base_sha else None)
        except (KeyboardInterrupt, SystemExit):
            # this builder stops (Ctrl-C, SIGTERM): the request goes back to wait for the next builder
            with session_scope(self.engine) as session:
                session.execute(sa.update(BuildRequest).where(BuildRequest.id == build_id)
                                .values(status="pending", started_at=None, heartbeat_at=None))
            raise
        except Exception as exc:
            log.exception("build of %s failed", sha[:10])
            with session_scope(self.engine) as session:
                fail_build(session, build_id=build_id, error=f"build failed: {exc}")
        finally:
            done.set()
            beats.join()
        return True


def finish_build(session: Session, *, build_id: int, digest: str, base_digest: str | None = None) -> None:
    """The run's bundles exist: its jobs get them (both at once when paired) and become claimable."""
    build = session.get(BuildRequest, build_id)
    assert build is not None
    build.status, build.bundle_digest, build.finished_at = "done", digest, utcnow()
    session.execute(sa.update(Job).where(Job.run_id == build.run_id, Job.bundle_digest.is_(None))
                    .values(bundle_digest=digest, base_bundle_digest=base_digest))


def fail_build(session: Session, *, build_id: int, error: str) -> None:
    build = session.get(BuildRequest, build_id)
    assert build is not None
    build.status, build.error, build.finished_at = "failed", error[:4000], utcnow()
    for job_id in session.scalars(sa.select(Job.id).where(Job.run_id == build.run_id, Job.status == "queued")):
        ingest.set_job_status(session, job_id=job_id, status="failed", error=error[:4000])


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
            if session.scalar(sa.select(Run.id).where(Run.kind == "nightly", Run.created_at >= due).limit(1)):
                return False
            classes = list(session.scalars(sa.select(DeviceClassRow.name).order_by(DeviceClassRow.name)))
            if not classes:
                log.info("nightly: no device class registered yet")
                return False
            repository, sha = self._head(session)
            result = queue_run(session, repository=repository, commit_sha=sha, device_classes=classes, cases=None,
                               max_attempts=self.settings.dispatch.max_attempts,
                               extra_targets=self.settings.dispatch.build_targets, kind="nightly")
            # the run is dated by the scheduler's clock, which the check above compares with
            session.execute(sa.update(Run).where(Run.id == result.run_id).values(created_at=now))
        log.info("nightly run %s of %s@%s on %s", result.run_id, repository, sha[:10], ", ".join(classes))
        return False

    def _head(self, session: Session) -> tuple[str, str]:
        if self.settings.dispatch.suite_path:
            return resolve_commit_for_trigger(session, self.settings, repository=None,
                                              ref=self.settings.dispatch.nightly_ref, commit=None)
        from pipeline.store.history import default_branch_head

        repo = session.scalar(sa.select(Repository).where(Repository.name == self.settings.repository)) \
            if self.settings.repository else session.scalar(sa.select(Repository).order_by(Repository.id).limit(1))
        head = default_branch_head(session, repo.id) if repo is not None else None
        if repo is None or head is None:
            raise TriggerError("nightly: no suite checkout and no stored default-branch head to run")
        return repo.name, session.get(Commit, head).sha  # type: ignore[union-attr]
