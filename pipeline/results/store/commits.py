"""Commits and repositories as the pages and the API name them: a commit's message, author and
page, a pull request's newest commit, the recorded repositories and their default branches."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.results.store.history import HISTORY_ORDER, default_branch_head
from pipeline.results.store.models import Commit, Repository

__all__ = ["CommitDescription", "default_branch", "default_branch_head_of", "describe_commits", "pull_request_head",
           "repositories"]


@dataclass(frozen=True)
class CommitDescription:
    """What a page shows of a commit beside its sha."""


    sha: str
    message: str
    author: str
    url: str | None
    """the repository's URL (the commit's page is built from it)"""


def describe_commits(session: Session, shas: Iterable[str]) -> dict[str, CommitDescription]:
    """sha -> message, author and repository URL (of the first repository that recorded it)."""
    wanted = sorted(set(shas))
    out: dict[str, CommitDescription] = {}
    for chunk in range(0, len(wanted), 500):
        for sha, message, author, url in session.execute(
            sa.select(Commit.sha, Commit.message, Commit.author, Repository.url)
            .join(Repository, Commit.repository_id == Repository.id)
            .where(Commit.sha.in_(wanted[chunk:chunk + 500])).order_by(Repository.id)
        ):
            out.setdefault(sha, CommitDescription(sha, message, author, url))
    return out


def repositories(session: Session) -> list[str]:
    """The recorded repositories' names, sorted."""
    return list(session.scalars(sa.select(Repository.name).order_by(Repository.name)))


def default_branch(session: Session, repository: str) -> str | None:
    """The repository's default branch as recorded; None for a repository the store does not know."""
    return session.scalar(sa.select(Repository.default_branch).where(Repository.name == repository))


def pull_request_head(session: Session, repository: str, number: int) -> str | None:
    """The newest recorded commit of pull request `number`."""
    return session.scalar(
        sa.select(Commit.sha).join(Repository, Commit.repository_id == Repository.id)
        .where(Repository.name == repository, Commit.pull_request == number)
        .order_by(*(column.desc() for column in HISTORY_ORDER)).limit(1))


def default_branch_head_of(session: Session, repository: str | None) -> tuple[str, str] | None:
    """(repository, sha) of the default-branch head (`history.default_branch_head`) of the repository,
    or of the first recorded one when None; None when there is no such repository or head."""
    query = sa.select(Repository.id, Repository.name)
    found = session.execute(query.where(Repository.name == repository) if repository is not None
                            else query.order_by(Repository.id).limit(1)).first()
    head = default_branch_head(session, found.id) if found is not None else None
    if found is None or head is None:
        return None
    sha = session.scalar(sa.select(Commit.sha).where(Commit.id == head))
    assert sha is not None   # the head is a stored commit
    return found.name, sha
