"""The builds queued runs wait for (`BuildRequest`), as stored: a run's jobs get a bundle at once
when one covers their targets (`give_bundles`), else a build request waits for a builder,
which takes it (one compare-and-set: several builders may share a store), renews its heartbeat,
and hands the bundle to the jobs or fails them. Which bundle covers which targets is the
dispatcher's (`pipeline.orchestration.dispatch.triggers` reads the manifests). Nothing here commits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.results.store import ingest
from pipeline.results.store.db import rowcount
from pipeline.results.store.models import BuildRequest, Bundle, Commit, Job, Repository, Run, utcnow

__all__ = ["PendingBuild", "beat", "bundles_of", "fail_build", "finish_build", "give_bundles", "nightly_queued_since",
           "release", "request_build", "requeue_silent_builds", "take_pending"]


def bundles_of(session: Session, *, repository: str, sha: str) -> list[tuple[str, str]] | None:
    """(digest, path) of the commit's bundles, newest first; None when the commit is not recorded."""
    commit_id = session.scalar(sa.select(Commit.id).join(Repository, Commit.repository_id == Repository.id)
                               .where(Repository.name == repository, Commit.sha == sha))
    if commit_id is None:
        return None
    return [(digest, path) for digest, path in session.execute(
        sa.select(Bundle.digest, Bundle.path).where(Bundle.commit_id == commit_id)
        .order_by(Bundle.created_at.desc(), Bundle.id.desc()))]


def give_bundles(session: Session, *, run_id: str, digest: str, base_digest: str | None = None) -> None:
    """The run's jobs still without a bundle get these (both at once when paired) and become claimable."""
    session.execute(sa.update(Job).where(Job.run_id == run_id, Job.bundle_digest.is_(None))
                    .values(bundle_digest=digest, base_bundle_digest=base_digest))


def request_build(session: Session, *, run_id: str, targets: Sequence[str], base_sha: str | None = None) -> None:
    """The run waits for a builder to build its commit (and `base_sha`, when paired) for `targets`."""
    session.add(BuildRequest(run_id=run_id, targets=sorted(targets), status="pending", created_at=utcnow(),
                             base_sha=base_sha))
    session.flush()


@dataclass(frozen=True)
class PendingBuild:
    id: int
    repository: str
    sha: str
    targets: list[str]
    base_sha: str | None


def take_pending(session: Session) -> PendingBuild | None:
    """The oldest pending build, now building under the caller; None when there is none, or another
    builder took it first."""
    row = session.execute(
        sa.select(BuildRequest.id, Repository.name, Commit.sha, BuildRequest.targets, BuildRequest.base_sha)
        .join(Run, BuildRequest.run_id == Run.id).join(Repository, Run.repository_id == Repository.id)
        .join(Commit, Run.commit_id == Commit.id)
        .where(BuildRequest.status == "pending").order_by(BuildRequest.created_at).limit(1)).first()
    if row is None:
        return None
    won = rowcount(session.execute(
        sa.update(BuildRequest).where(BuildRequest.id == row[0], BuildRequest.status == "pending")
        .values(status="building", started_at=utcnow(), heartbeat_at=utcnow())))
    return PendingBuild(row[0], row[1], row[2], list(row[3]), row[4]) if won == 1 else None


def beat(session: Session, build_id: int) -> None:
    """The builder of a build still building is alive (its heartbeat)."""
    session.execute(sa.update(BuildRequest).where(BuildRequest.id == build_id, BuildRequest.status == "building")
                    .values(heartbeat_at=utcnow()))


def release(session: Session, build_id: int) -> None:
    """The build goes back to pending, for the next builder (this one stops)."""
    session.execute(sa.update(BuildRequest).where(BuildRequest.id == build_id)
                    .values(status="pending", started_at=None, heartbeat_at=None))


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


def finish_build(session: Session, *, build_id: int, digest: str, base_digest: str | None = None) -> None:
    """The run's bundles exist: its jobs get them (both at once when paired) and become claimable."""
    build = session.get(BuildRequest, build_id)
    assert build is not None
    build.status, build.bundle_digest, build.finished_at = "done", digest, utcnow()
    give_bundles(session, run_id=build.run_id, digest=digest, base_digest=base_digest)


def fail_build(session: Session, *, build_id: int, error: str) -> None:
    """The build failed: so do the run's jobs still queued, with its error."""
    build = session.get(BuildRequest, build_id)
    assert build is not None
    build.status, build.error, build.finished_at = "failed", error[:4000], utcnow()
    for job_id in session.scalars(sa.select(Job.id).where(Job.run_id == build.run_id, Job.status == "queued")):
        ingest.set_job_status(session, job_id=job_id, status="failed", error=error[:4000])


def nightly_queued_since(session: Session, since: datetime) -> bool:
    """Whether a nightly run was queued at `since` or later."""
    return session.scalar(sa.select(Run.id).where(Run.kind == "nightly", Run.created_at >= since).limit(1)) is not None
