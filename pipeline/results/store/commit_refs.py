"""Commit references as people type them: a whole sha or the first few hex digits of one (the
terminal and the PR comment print 10, `git log --oneline` 7), resolved against the recorded commits.
One resolver for the API, the pages and the triggers."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.results.store.models import Commit, Repository

__all__ = ["FULL_SHA_LENGTH", "SHA_PREFIX_MIN", "CommitRefError", "commits_named", "resolve_commit"]

FULL_SHA_LENGTH = 40
"""Hex digits of a whole sha (the contracts' `Sha`: git's SHA-1 object names)."""
SHA_PREFIX_MIN = 4
"""Fewest hex digits of a sha prefix that names a commit (git's own minimum abbreviation)."""


class CommitRefError(ValueError):
    """A commit reference that names no recorded commit, or several."""


def commits_named(session: Session, ref: str, *, repository: str | None = None, limit: int = 5
                  ) -> list[tuple[str, str]]:
    """(repository, full sha) of the recorded commits that `ref` names: a whole sha or a prefix of at least
    `SHA_PREFIX_MIN` hex digits, any case (the terminal, the PR comment and git log show 10 or 7); at
    most `limit` of them, enough to tell an ambiguous prefix. None for anything else."""
    ref = ref.strip().lower()
    if len(ref) < SHA_PREFIX_MIN or any(c not in "0123456789abcdef" for c in ref):
        return []
    query = (sa.select(Repository.name, Commit.sha).join(Repository, Commit.repository_id == Repository.id)
             .where(Commit.sha.startswith(ref, autoescape=True)))
    if repository is not None:
        query = query.where(Repository.name == repository)
    return [(name, sha) for name, sha in session.execute(query.order_by(Repository.name, Commit.sha).limit(limit))]


def resolve_commit(session: Session, ref: str, *, repository: str | None = None) -> tuple[str, str]:
    """(repository, full sha) of the one recorded commit `ref` names (`commits_named`); raises
    CommitRefError naming the problem when it names none or several."""
    found = commits_named(session, ref, repository=repository)
    where = f" of {repository}" if repository is not None else ""
    if not found:
        raise CommitRefError(f"no recorded commit{where} is named {ref!r} (a sha, or {SHA_PREFIX_MIN} or more of "
                             "its first hex digits)")
    if len(found) > 1:
        names = ", ".join(sha[:12] if repository is not None else f"{name}@{sha[:12]}" for name, sha in found)
        raise CommitRefError(f"{ref!r} names several recorded commits{where} ({names}): give more of the sha")
    return found[0]
