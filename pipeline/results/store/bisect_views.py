"""Bisections as the API and the pages show them: each with its steps, commits as shas with their
first message line (`bisect` writes them; this module only reads)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict
from sqlalchemy.orm import Session, selectinload

from pipeline.results.store.models import (
    Bisection,
    ChangePoint,
    Commit,
    CommitParent,
    DeviceClassRow,
    Repository,
)

__all__ = ["BisectionView", "StepView", "get_bisection", "latest_by_change_point", "list_bisections",
           "one_commit_ranges"]


class StepView(BaseModel):
    model_config = ConfigDict(frozen=True)

    position: int
    """in the range: 1 is the commit after the base, `commits` the bad one"""
    reading: int
    """1; 2 for the commit's second job (run to confirm a change found at several places)"""
    commit: str
    message: str
    state: str
    """queued | done | skipped"""
    verdict: str | None
    """old level | new level | in between | not reproduced; unbuildable | unrunnable | cancelled"""
    change: float | None
    ci_low: float | None
    ci_high: float | None
    pvalue: float | None
    paired: bool
    reason: str
    run_id: str | None
    job_id: str | None
    device_s: float | None


class BisectionView(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: int
    change_point_id: int
    repository: str
    repository_url: str | None
    device_class: str
    cases: list[str]
    base: str
    bad: str
    commits: int
    """first-parent commits in the range after the base (0 until resolved)"""
    state: str
    outcome: str | None
    culprit: str | None
    culprit_message: str
    summary: str
    reason: str
    result: dict[str, Any]
    max_steps: int
    max_device_s: float
    device_s: float
    requested_by: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    steps: list[StepView]

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running")


def _first_line(message: str | None) -> str:
    return (message or "").strip().split("\n", 1)[0][:200]


def _views(session: Session, rows: Sequence[Bisection]) -> list[BisectionView]:
    commit_ids = {i for b in rows for i in (b.base_commit_id, b.bad_commit_id, b.culprit_commit_id) if i}
    commit_ids |= {s.commit_id for b in rows for s in b.steps}
    commits = {i: (sha, msg) for i, sha, msg in session.execute(
        sa.select(Commit.id, Commit.sha, Commit.message).where(Commit.id.in_(sorted(commit_ids))))} if commit_ids else {}
    repos = {i: (name, url) for i, name, url in session.execute(sa.select(Repository.id, Repository.name, Repository.url))}
    classes = {i: name for i, name in session.execute(sa.select(DeviceClassRow.id, DeviceClassRow.name))}
    out = []
    for b in rows:
        culprit = commits.get(b.culprit_commit_id) if b.culprit_commit_id else None
        steps = [StepView(position=s.position, reading=s.reading, commit=commits[s.commit_id][0], message=_first_line(commits[s.commit_id][1]),
                          state=s.state, verdict=s.verdict, change=s.change, ci_low=s.ci_low, ci_high=s.ci_high,
                          pvalue=s.pvalue, paired=s.paired, reason=s.reason, run_id=s.run_id, job_id=s.job_id,
                          device_s=s.device_s) for s in sorted(b.steps, key=lambda s: s.id)]
        out.append(BisectionView(
            id=b.id, change_point_id=b.change_point_id, repository=repos[b.repository_id][0],
            repository_url=repos[b.repository_id][1], device_class=classes[b.device_class_id], cases=list(b.cases),
            base=commits[b.base_commit_id][0], bad=commits[b.bad_commit_id][0], commits=len(b.commits), state=b.state,
            outcome=b.outcome, culprit=culprit[0] if culprit else None,
            culprit_message=_first_line(culprit[1]) if culprit else "", summary=b.summary, reason=b.reason,
            result=dict(b.result), max_steps=b.max_steps, max_device_s=b.max_device_s, device_s=b.device_s,
            requested_by=b.requested_by, created_at=b.created_at, started_at=b.started_at,
            finished_at=b.finished_at, steps=steps))
    return out


def get_bisection(session: Session, bisection_id: int) -> BisectionView | None:
    row = session.scalar(sa.select(Bisection).options(selectinload(Bisection.steps)).where(Bisection.id == bisection_id))
    return _views(session, [row])[0] if row is not None else None


def list_bisections(session: Session, *, change_point_id: int | None = None, state: str | None = None,
                    limit: int = 100) -> list[BisectionView]:
    """Bisections, newest first, of one change point and/or in one state."""
    query = sa.select(Bisection).options(selectinload(Bisection.steps))
    if change_point_id is not None:
        query = query.where(Bisection.change_point_id == change_point_id)
    if state is not None:
        query = query.where(Bisection.state == state)
    return _views(session, session.scalars(query.order_by(Bisection.created_at.desc(), Bisection.id.desc())
                                           .limit(limit)).all())


def latest_by_change_point(session: Session, change_point_ids: Sequence[int]) -> dict[int, BisectionView]:
    """change point id -> its newest bisection (the active one when there is one)."""
    if not change_point_ids:
        return {}
    newest = (sa.select(sa.func.max(Bisection.id)).where(Bisection.change_point_id.in_(sorted(set(change_point_ids))))
              .group_by(Bisection.change_point_id))
    rows = session.scalars(sa.select(Bisection).options(selectinload(Bisection.steps))
                           .where(Bisection.id.in_(newest))).all()
    return {v.change_point_id: v for v in _views(session, rows)}


def one_commit_ranges(session: Session, change_point_ids: Sequence[int]) -> set[int]:
    """The change points whose range holds one commit (the after commit's first parent is the
    before commit): that commit made the change, there is nothing to bisect."""
    if not change_point_ids:
        return set()
    before = sa.orm.aliased(Commit)
    return set(session.scalars(
        sa.select(ChangePoint.id).join(before, ChangePoint.before_commit_id == before.id)
        .join(CommitParent, sa.and_(CommitParent.commit_id == ChangePoint.after_commit_id, CommitParent.position == 0))
        .where(ChangePoint.id.in_(sorted(set(change_point_ids))), CommitParent.parent_sha == before.sha)))
