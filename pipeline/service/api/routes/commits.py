"""Commits: what the store recorded of each repository's history."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query

from pipeline.service.api.deps import SessionDep
from pipeline.service.api.schemas import ErrorBody
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.results.store import commit_refs, queries
from pipeline.results.store.queries import CommitDetailOut, CommitOut

router = APIRouter(route_class=StrictJsonRoute, tags=["commits"])


@router.get("/commits", response_model=list[CommitOut], summary="List recorded commits, newest first")
def list_commits(
    session: SessionDep, repository: str | None = None, branch: str | None = None,
    limit: int = Query(100, ge=1, le=1000),
) -> list[CommitOut]:
    return queries.list_commits(session, repository=repository, branch=branch, limit=limit)


@router.get(
    "/commits/{sha}", response_model=CommitDetailOut, summary="One commit with its runs",
    description="`sha`: a full sha or a prefix of 4 or more hex digits that names one recorded commit. "
                "`repository` is needed only when several repositories recorded the same sha.",
    responses={404: {"model": ErrorBody}, 409: {"model": ErrorBody}},
)
def get_commit(sha: str, session: SessionDep, repository: str | None = None) -> CommitDetailOut:
    named = sorted({full for _, full in commit_refs.commits_named(session, sha, repository=repository)})
    if len(named) > 1:
        raise HTTPException(409, f"{sha!r} names several recorded commits ({', '.join(n[:12] for n in named)}): "
                                 "give more of the sha")
    found = queries.find_commits(session, named[0] if named else sha, repository=repository)
    if not found:
        raise HTTPException(404, f"no commit {sha}" + (f" in {repository}" if repository else ""))
    if len(found) > 1:
        names = ", ".join(c.repository for c in found)
        raise HTTPException(409, f"commit {sha} is recorded in several repositories ({names}): pass repository")
    return queries.commit_detail(session, found[0])
