"""Which commits make up a repository's default-branch history, from what the store holds.

The store records commits with their parents (in git order) and, when the recorder knew it, the
branch they were pushed to. The default-branch history is the first-parent chain of the
default-branch head, oldest first:

- head: the newest recorded commit whose `branch` is the repository's `default_branch`, newest by
  ancestry (`HISTORY_ORDER`: the first-parent generation, then commit time, then storage order),
  never by commit time alone. A repository none of whose commits names a branch (commits
  recorded from a local checkout by `benchfarm run`) falls back to the newest commit that a
  push, nightly or local run measured: the line of history someone benchmarks on their machine
  (`benchfarm run` records a commit off its checkout's first-parent line, such as a working tree,
  as an ad-hoc run, which stays out of it);
- chain: from the head along first parents, as long as the parent is recorded. A merge commit's
  second parent (the merged branch's own commits) is not on the chain: the chain is what
  `git log --first-parent` shows, one commit per merged pull request.

A default-branch commit that is not on the chain (a force-push left it behind) is not part of the
history. Cost: one query over the repository's commits and first parents, then a walk in Python:
O(commits of the repository), independent of the number of measurements.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from statistics import median

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.results.store.models import Commit, CommitParent, Repository, Run

__all__ = ["FALLBACK_RUN_KINDS", "HISTORY_ORDER", "ChainCommit", "commit_level", "default_branch_chain",
           "default_branch_head", "extend_generations", "history_order", "update_generations"]

FALLBACK_RUN_KINDS = ("push", "nightly", "local")
"""Runs whose newest commit is the head when no recorded commit names the default branch."""


@dataclass(frozen=True)
class ChainCommit:
    id: int
    sha: str
    committed_at: datetime


HISTORY_ORDER = (Commit.generation, Commit.committed_at, Commit.id)
"""The order of history everywhere (oldest first; `.desc()` each for newest first): ancestry (the
first-parent generation), then commit time and storage order only between commits that ancestry
does not order (two branches' commits)."""


def _generations(rows: Sequence[tuple[int, str, str | None]]) -> dict[int, int]:
    """commit id -> its number of recorded first-parent ancestors, for (id, sha, first parent sha) rows."""
    parent_of = {sha: parent for _, sha, parent in rows}
    id_of = {sha: commit_id for commit_id, sha, _ in rows}
    depth: dict[str, int] = {}
    for _, sha, _ in rows:
        path: list[str] = []
        seen: set[str] = set()
        current: str | None = sha
        while current is not None and current in id_of and current not in depth and current not in seen:
            path.append(current)
            seen.add(current)
            current = parent_of[current]
        level = depth[current] if current is not None and current in depth else -1
        for walked in reversed(path):
            level += 1
            depth[walked] = level
    return {id_of[sha]: d for sha, d in depth.items()}


def update_generations(session: Session, repository_id: int) -> None:
    """Bring `Commit.generation` of the repository's commits in line with the parents recorded: a
    commit recorded before its ancestors (a run of a newer commit first) moves up once they come.
    One query over the repository's commits and first parents, and an UPDATE of those that changed."""
    rows = session.execute(
        sa.select(Commit.id, Commit.sha, CommitParent.parent_sha, Commit.generation)
        .outerjoin(CommitParent, sa.and_(CommitParent.commit_id == Commit.id, CommitParent.position == 0))
        .where(Commit.repository_id == repository_id)).all()
    stored = {r.id: r.generation for r in rows}
    changed = [{"id": commit_id, "generation": generation}
               for commit_id, generation in _generations([(r.id, r.sha, r.parent_sha) for r in rows]).items()
               if stored[commit_id] != generation]
    if changed:
        session.execute(sa.update(Commit), changed)   # by primary key; loaded rows read theirs again
        for row in [o for o in session.identity_map.values() if isinstance(o, Commit)]:
            session.expire(row, ["generation"])


def extend_generations(session: Session, repository_id: int, added: Sequence[Commit]) -> bool:
    """Give commits just recorded their generation from their first parents' (one query each for the
    parents and for stored children), without the walk over the repository that `update_generations`
    does; the same numbers. False when a stored commit names one of them as its first parent
    (recorded before its ancestor: its descendants move too) or first parents form a cycle: then
    the caller walks (`update_generations`)."""
    shas = {c.sha for c in added}
    if session.scalar(sa.select(CommitParent.commit_id).join(Commit, CommitParent.commit_id == Commit.id)
                      .where(Commit.repository_id == repository_id, CommitParent.position == 0,
                             CommitParent.parent_sha.in_(shas), Commit.sha.not_in(shas)).limit(1)) is not None:
        return False
    first_parent = {c.sha: (c.parents[0].parent_sha if c.parents else None) for c in added}
    outside = {p for p in first_parent.values() if p is not None and p not in shas}
    generation: dict[str, int] = {sha: level for sha, level in session.execute(
        sa.select(Commit.sha, Commit.generation).where(Commit.repository_id == repository_id,
                                                       Commit.sha.in_(outside)))} if outside else {}
    pending = list(added)
    while pending:   # parents first: a batch may hold a chain in any order
        waiting = []
        for commit in pending:
            parent = first_parent[commit.sha]
            if parent is not None and parent in shas and parent not in generation:
                waiting.append(commit)
                continue
            generation[commit.sha] = generation[parent] + 1 if parent in generation else 0
            commit.generation = generation[commit.sha]
        if len(waiting) == len(pending):   # a cycle of first parents: leave it to the walk
            return False
        pending = waiting
    return True


def commit_level(medians: Iterable[tuple[str, float]]) -> tuple[float, int]:
    """A commit's point in a series from its measurements there, as (run id, median) pairs: the
    median of its runs' levels (a run's level: the median of its own measurements, one unless its
    device class timed the case on several targets), and how many runs. Every run of a commit is
    kept: running a commit again adds a level to this median, it replaces none (series pages, the
    analysis and the series' latest value all use this rule)."""
    by_run: dict[str, list[float]] = {}
    for run_id, value in medians:
        by_run.setdefault(run_id, []).append(value)
    return median(median(values) for values in by_run.values()), len(by_run)


def default_branch_head(session: Session, repository_id: int) -> int | None:
    """The id of the default-branch head (module doc), or None when the repository has none."""
    default_branch = sa.select(Repository.default_branch).where(Repository.id == repository_id).scalar_subquery()
    newest_first = [column.desc() for column in HISTORY_ORDER]
    head = session.scalar(
        sa.select(Commit.id).where(Commit.repository_id == repository_id, Commit.branch == default_branch)
        .order_by(*newest_first).limit(1))
    if head is not None:
        return head
    named = session.scalar(sa.select(Commit.id).where(Commit.repository_id == repository_id,
                                                      Commit.branch.is_not(None)).limit(1))
    if named is not None:  # branches are recorded, just not the default one: no default-branch history yet
        return None
    return session.scalar(
        sa.select(Commit.id).join(Run, Run.commit_id == Commit.id)
        .where(Commit.repository_id == repository_id, Run.kind.in_(FALLBACK_RUN_KINDS))
        .order_by(*newest_first).limit(1))


def default_branch_chain(session: Session, repository_id: int) -> list[ChainCommit]:
    """The default-branch history of the repository, oldest commit first (module doc)."""
    head = default_branch_head(session, repository_id)
    if head is None:
        return []
    rows = session.execute(
        sa.select(Commit.id, Commit.sha, Commit.committed_at, CommitParent.parent_sha)
        .outerjoin(CommitParent, sa.and_(CommitParent.commit_id == Commit.id, CommitParent.position == 0))
        .where(Commit.repository_id == repository_id)
    ).all()
    by_id = {r.id: r for r in rows}
    by_sha = {r.sha: r for r in rows}
    chain: list[ChainCommit] = []
    seen: set[int] = set()
    row = by_id.get(head)
    while row is not None and row.id not in seen:
        seen.add(row.id)
        chain.append(ChainCommit(row.id, row.sha, row.committed_at))
        row = by_sha.get(row.parent_sha) if row.parent_sha else None
    chain.reverse()
    return chain


def history_order(session: Session, commit_ids: Collection[int]) -> list[int]:
    """Those of the commits that are history, oldest first: along their repository's default-branch
    history (`default_branch_chain`), the commits off it (pull requests, working trees, ad-hoc runs of
    other branches) left out; where a repository has no default-branch history yet, every one of its
    commits in `HISTORY_ORDER`. Repositories one after another, by id. Every series of a case read
    along history (latency, hardware counters) is ordered by this, never by commit time first."""
    if not commit_ids:
        return []
    rows = session.execute(sa.select(Commit.id, Commit.repository_id).where(Commit.id.in_(sorted(commit_ids)))
                           .order_by(Commit.repository_id, *HISTORY_ORDER)).all()
    ordered: list[int] = []
    for repository_id in dict.fromkeys(r.repository_id for r in rows):
        chain = default_branch_chain(session, repository_id)
        ordered += ([c.id for c in chain if c.id in commit_ids] if chain else
                    [r.id for r in rows if r.repository_id == repository_id])
    return ordered
