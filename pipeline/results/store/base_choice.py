"""The base a commit is compared with, on one device class (docs/design.md, "Analysis": PR verdict).

`compare.compare` takes as the base, on one device class:
- the one given by the caller (`base_sha`): that commit;
- else, when the head's results on that device class were timed paired with a base
  (`CaseResult.paired_base`): that commit, which the job chose when it was planned;
- else (`choose_base`) the newest first-parent ancestor of the merge base, the merge base itself included, that
  has latency results on the device class, searching at most `CompareSettings.ancestor_walk`
  commits. The merge base is the caller's (a webhook knows the pull request's base sha), or else
  the first commit of the default-branch history (`history.default_branch_chain`) met walking the
  head's first parents. A head that is itself on the default branch (a push) is compared with its
  first-parent ancestors; so is one whose walk meets no default-branch commit (nothing recorded as
  the default branch, or a branch that forked long ago): its own first-parent ancestors.

That base is the comparison's; a base per case: a case the base has no result of is compared with
the nearest older first-parent ancestor that has one on the class (`older_bases`), unless the base
was given. A commit that ran only some cases is thus the base of those alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.contracts.metrics import LATENCY
from pipeline.results.store.history import default_branch_chain
from pipeline.results.store.models import (
    CaseResultRow,
    Commit,
    CommitParent,
    DeviceClassRow,
    Job,
    Measurement,
    Repository,
    Run,
    Series,
)

__all__ = ["BaseChoice", "CompareError", "choose_base", "device_class_id", "find_base", "lookup_commit",
           "older_bases"]


class CompareError(LookupError):
    """The repository, commit or device class asked for is not in the store."""


@dataclass(frozen=True)
class BaseChoice:
    sha: str | None
    merge_base: str | None
    source: str


def lookup_commit(session: Session, repository: str, sha: str) -> Commit:
    commit = session.scalar(
        sa.select(Commit).join(Repository, Commit.repository_id == Repository.id)
        .where(Repository.name == repository, Commit.sha == sha))
    if commit is None:
        raise CompareError(f"commit {sha} of {repository} is not recorded")
    return commit


def device_class_id(session: Session, name: str) -> int:
    dc_id = session.scalar(sa.select(DeviceClassRow.id).where(DeviceClassRow.name == name))
    if dc_id is None:
        raise CompareError(f"unknown device class {name!r}")
    return dc_id


def _has_measurement(session: Session, commit_id: int, device_class_id: int) -> bool:
    # The commit's jobs on the class first (a few rows), then one of their results with a latency
    # measurement: neither the commit's measurements on every class (20,000 on a large farm) nor a
    # single join, which PostgreSQL's planner, betting on LIMIT 1, ran as a scan of every result.
    jobs = session.scalars(sa.select(Job.id).join(Run, Job.run_id == Run.id)
                           .where(Run.commit_id == commit_id, Job.device_class_id == device_class_id)).all()
    return bool(jobs) and session.scalar(
        sa.select(sa.literal(True)).select_from(CaseResultRow)
        .join(Measurement, Measurement.case_result_id == CaseResultRow.id)
        .join(Series, Measurement.series_id == Series.id)
        .where(CaseResultRow.job_id.in_(jobs), Series.metric == LATENCY).limit(1)) is not None


def _first_parent(session: Session, commit: Commit) -> Commit | None:
    parent_sha = session.scalar(
        sa.select(CommitParent.parent_sha).where(CommitParent.commit_id == commit.id, CommitParent.position == 0))
    if parent_sha is None:
        return None
    return session.scalar(sa.select(Commit).where(Commit.repository_id == commit.repository_id, Commit.sha == parent_sha))


def _merge_base(session: Session, head: Commit, walk: int) -> Commit | None:
    """The first default-branch commit on head's first-parent chain (head excluded), within `walk`
    steps; None when head is on the default branch or no such commit is met."""
    on_default = {c.id for c in default_branch_chain(session, head.repository_id)}
    if not on_default or head.id in on_default:
        return None
    commit: Commit | None = head
    for _ in range(walk):
        commit = _first_parent(session, commit) if commit is not None else None
        if commit is None:
            return None
        if commit.id in on_default:
            return commit
    return None


def _walk_for_results(session: Session, start: Commit | None, device_class_id: int, walk: int) -> Commit | None:
    commit = start
    for _ in range(walk):
        if commit is None:
            return None
        if _has_measurement(session, commit.id, device_class_id):
            return commit
        commit = _first_parent(session, commit)
    return None


def older_bases(session: Session, base: Commit, device_class_id: int, walk: int) -> Iterator[Commit]:
    """The first-parent ancestors of `base` (base excluded) with latency results on the device class,
    nearest first, within `walk` steps: where the cases `base` did not run are looked for (a commit
    that ran part of the suite, `--cases`, is the base only of what it ran)."""
    commit = _first_parent(session, base)
    for _ in range(walk):
        if commit is None:
            return
        if _has_measurement(session, commit.id, device_class_id):
            yield commit
        commit = _first_parent(session, commit)


def choose_base(
    session: Session, *, repository: str, sha: str, device_class: str, walk: int, merge_base: str | None = None,
) -> BaseChoice:
    """The base of `sha` on `device_class` by the merge-base walk (module doc; no pairing, no
    explicit base). Raises CompareError when `sha`, `merge_base` or the device class is unknown."""
    dc_id = device_class_id(session, device_class)
    head = lookup_commit(session, repository, sha)
    if merge_base is not None:
        start: Commit | None = lookup_commit(session, repository, merge_base)
        source = "merge base"
    else:
        start = _merge_base(session, head, walk)
        source = "merge base"
        if start is None:
            start, source = _first_parent(session, head), "first parent"
    found = _walk_for_results(session, start, dc_id, walk)
    return BaseChoice(found.sha if found else None, start.sha if start is not None and source == "merge base" else None,
                      source if found else "none")


def find_base(
    session: Session, *, repository: str, sha: str, device_class: str, walk: int, merge_base: str | None = None,
) -> str | None:
    """The sha of `choose_base`'s base, or None."""
    return choose_base(session, repository=repository, sha=sha, device_class=device_class, walk=walk,
                       merge_base=merge_base).sha
