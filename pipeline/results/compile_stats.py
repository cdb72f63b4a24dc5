"""Compile statistics as series: what the compiler reported for a case on a target, commit by commit.

A compile series is (case, target), one value per metric: compile time, binary size, registers,
spills, shared/LDS bytes (`METRIC_COLUMNS`). It is keyed with the target, not a device class: a
build-only target (gfx1250, which no agent runs) has a history like any other, and `cuda:sm_90`
and `rocm:gfx942` of one case are two series. The values come from the bundles' manifests
(`ingest.ingest_manifest` stores them in `compile_stats`); the newest bundle of a commit wins.

Comparisons: the deterministic figures (binary size, registers, spills, shared bytes) change or
they do not: any difference is a change, no statistics needed. Compile time is a timing of the
builder, noisy and machine-dependent: it has a history but is not compared. A compile change is
reported beside the latency verdict and never decides it: more registers are a reason to look,
not a regression by themselves (the latency rows say whether it cost anything).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.results.history import default_branch_chain
from pipeline.results.models import Bundle, Case, Commit, CompileStat, Repository

__all__ = ["COMPARED_METRICS", "METRIC_COLUMNS", "CompileChange", "CompilePoint", "CompileSeries",
           "compile_changes", "compile_history", "list_compile_series"]

METRIC_COLUMNS: dict[str, str] = {
    "compile_time": "compile_time_s",
    "binary_size": "binary_bytes",
    "registers": "registers",
    "spills": "spills",
    "shared_bytes": "shared_bytes",
}
"""Metric name (`pipeline.contracts.METRICS`) -> its column of `compile_stats`."""
COMPARED_METRICS = ("binary_size", "registers", "spills", "shared_bytes")
"""The deterministic metrics: compared between commits (compile time is not: module doc)."""


@dataclass(frozen=True)
class CompileSeries:
    case_id: str
    target: str
    commits: int
    latest: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class CompilePoint:
    sha: str
    committed_at: datetime
    status: str
    values: dict[str, float | None]


@dataclass(frozen=True)
class CompileChange:
    case_id: str
    target: str
    metric: str
    base: float | None
    head: float | None

    @property
    def change(self) -> float | None:
        """Relative change (head / base - 1); None when either side is missing or base is 0."""
        if self.base is None or self.head is None or self.base == 0:
            return None
        return self.head / self.base - 1.0


def _newest_per_commit(session: Session, repository: str, *, case_id: str | None = None, target: str | None = None,
                       commit_ids: Sequence[int] | None = None) -> list[sa.Row]:
    """The compile_stats rows of the newest bundle of each commit, joined with case and commit."""
    ranked = (
        sa.select(CompileStat, Case.case_id.label("case_text"), Commit.id.label("commit_pk"), Commit.sha,
                  Commit.committed_at,
                  sa.func.row_number().over(
                      partition_by=(Bundle.commit_id, CompileStat.case_id, CompileStat.target),
                      order_by=(Bundle.created_at.desc(), Bundle.id.desc())).label("rank"))
        .join(Bundle, CompileStat.bundle_id == Bundle.id)
        .join(Commit, Bundle.commit_id == Commit.id)
        .join(Repository, Commit.repository_id == Repository.id)
        .join(Case, CompileStat.case_id == Case.id)
        .where(Repository.name == repository)
    )
    if case_id is not None:
        ranked = ranked.where(Case.case_id == case_id)
    if target is not None:
        ranked = ranked.where(CompileStat.target == target)
    if commit_ids is not None:
        ranked = ranked.where(Commit.id.in_(list(commit_ids)))
    sub = ranked.subquery()
    return list(session.execute(sa.select(sub).where(sub.c.rank == 1)).all())


def _values(row: sa.Row) -> dict[str, float | None]:
    return {metric: getattr(row, column) for metric, column in METRIC_COLUMNS.items()}


def list_compile_series(session: Session, repository: str) -> list[CompileSeries]:
    """Every (case, target) the repository's bundles compiled, with its newest values, sorted."""
    rows = _newest_per_commit(session, repository)
    by_key: dict[tuple[str, str], list[sa.Row]] = {}
    for row in rows:
        by_key.setdefault((row.case_text, row.target), []).append(row)
    out = []
    for (case_text, target), points in sorted(by_key.items()):
        newest = max(points, key=lambda r: (r.committed_at, r.commit_pk))
        out.append(CompileSeries(case_text, target, len(points), _values(newest)))
    return out


def compile_history(session: Session, repository: str, case_id: str, target: str) -> list[CompilePoint]:
    """The series' values along the default-branch history (`history.default_branch_chain`), oldest
    first; when the repository has no default-branch history yet, every commit by commit time."""
    rows = _newest_per_commit(session, repository, case_id=case_id, target=target)
    repo_id = session.scalar(sa.select(Repository.id).where(Repository.name == repository))
    chain = default_branch_chain(session, repo_id) if repo_id is not None else []
    by_commit = {row.commit_pk: row for row in rows}
    ordered = ([by_commit[c.id] for c in chain if c.id in by_commit] if chain
               else sorted(rows, key=lambda r: (r.committed_at, r.commit_pk)))
    return [CompilePoint(r.sha, r.committed_at, r.status, _values(r)) for r in ordered]


def compile_changes(session: Session, repository: str, *, head_sha: str, base_sha: str) -> list[CompileChange]:
    """Each compared metric (`COMPARED_METRICS`) of each (case, target) compiled at both commits
    whose value differs between them, sorted by case, target and metric."""
    commits = dict(session.execute(
        sa.select(Commit.sha, Commit.id).join(Repository, Commit.repository_id == Repository.id)
        .where(Repository.name == repository, Commit.sha.in_([head_sha, base_sha]))).all())
    if head_sha not in commits or base_sha not in commits:
        return []
    rows = _newest_per_commit(session, repository, commit_ids=[commits[head_sha], commits[base_sha]])
    head = {(r.case_text, r.target): r for r in rows if r.commit_pk == commits[head_sha] and r.status == "built"}
    base = {(r.case_text, r.target): r for r in rows if r.commit_pk == commits[base_sha] and r.status == "built"}
    changes = []
    for key in sorted(head.keys() & base.keys()):
        for metric in COMPARED_METRICS:
            column = METRIC_COLUMNS[metric]
            b, h = getattr(base[key], column), getattr(head[key], column)
            if b != h:
                changes.append(CompileChange(key[0], key[1], metric, b, h))
    return changes
