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

Change points: a deterministic figure has no noise to see through, so its change points are its
steps, every commit of the history whose figure differs from the previous built commit's
(`compile_steps`). They are computed when read, not stored or triaged like latency change points
(`changepoints`): there is nothing to confirm or retract, and a step is not a regression.

Base of a comparison (`compare_compile`): the one given; else the latency verdict's base (what the
PR comment and the compare page compare with); else the newest first-parent ancestor of the head
whose bundle compiled anything, so a build-only commit (no latency results) has a base too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from pipeline.contracts.ids import CaseId, CaseIdAsText
from pipeline.results.store.history import default_branch_chain
from pipeline.results.store.models import Bundle, Case, Commit, CommitParent, CompileStat, Repository

__all__ = ["COMPARED_METRICS", "METRIC_COLUMNS", "CompileChangeOut", "CompileComparisonOut", "CompilePointOut",
           "CompileSeriesOut", "CompileStepOut", "compare_compile", "compile_changes", "compile_history",
           "compile_steps", "compile_targets", "list_compile_series", "newest_per_commit", "relative_change"]

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


# The documents below are what the API serves and the pages render. The derived figures (`change`,
# `summary`) are fields set where the documents are made, not properties: the API's document lists
# them as plain fields (pydantic's computed fields would be marked readOnly there).


class CompileSeriesOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    case_id: CaseIdAsText
    target: str
    commits: int = Field(description="commits whose bundles compiled this case for this target")
    latest: dict[str, float | None] = Field(description="metric -> the newest commit's figure (None: not reported)")


class CompilePointOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    sha: str
    committed_at: datetime
    status: str = Field(description="built | failed")
    values: dict[str, float | None]


def relative_change(new: float | None, old: float | None) -> float | None:
    """new / old - 1; None when either side is missing or old is 0."""
    if old is None or new is None or old == 0:
        return None
    return new / old - 1.0


class CompileChangeOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    case_id: CaseIdAsText
    target: str
    metric: str
    base: float | None
    head: float | None
    change: float | None = Field(description="head / base - 1; None when a side is missing or base is 0")


# A compared figure that changed along the history: `before` at `before_sha`, `after` from
# `after_sha` (the next built commit of the history) on.
class CompileStepOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    metric: str
    before_sha: str
    after_sha: str = Field(description="the first commit of the history with the new value")
    before: float | None
    after: float | None
    change: float | None = Field(description="after / before - 1; None when a side is missing or before is 0")


class CompileComparisonOut(BaseModel):
    """The compile figures of the head against a base: beside the latency verdict, never part of it."""

    model_config = ConfigDict(frozen=True)

    head_sha: str
    base_sha: str | None
    base_source: str = Field(description="given | latency base | first-parent ancestor | none")
    compared: int = Field(description="(case, target) pairs built at both commits")
    summary: str = Field(description='one line, e.g. "2 cases changed binary size, registers"')
    changes: list[CompileChangeOut] = Field(
        description="binary size, registers, spills, shared bytes that differ (any difference: they are deterministic)")


def _summary(base_sha: str | None, compared: int, changes: Sequence[CompileChangeOut]) -> str:
    """One line: "2 cases changed binary size, registers (on 2 targets)", or why nothing is listed."""
    if base_sha is None:
        return "no base with compile statistics"
    if not changes:
        return f"{compared} case{'s' if compared != 1 else ''} compiled at both commits, none changed"
    cases = len({c.case_id for c in changes})
    targets = len({c.target for c in changes})
    metrics = ", ".join(sorted({c.metric.replace("_", " ") for c in changes}))
    return (f"{cases} case{'s' if cases != 1 else ''} changed {metrics}"
            + (f" (on {targets} targets)" if targets > 1 else ""))


def newest_per_commit(session: Session, repository: str, *, case_id: CaseId | str | None = None,
                       target: str | None = None,
                       commit_ids: Sequence[int] | None = None) -> list[sa.Row[Any]]:
    """The compile_stats rows of the newest bundle of each commit, joined with case and commit."""
    ranked = (
        sa.select(CompileStat, Case.case_id.label("case"), Commit.id.label("commit_pk"), Commit.sha,
                  Commit.committed_at, Commit.generation,
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


def _values(row: sa.Row[Any]) -> dict[str, float | None]:
    return {metric: getattr(row, column) for metric, column in METRIC_COLUMNS.items()}


def list_compile_series(session: Session, repository: str) -> list[CompileSeriesOut]:
    """Every (case, target) the repository's bundles compiled, with its newest values, sorted."""
    rows = newest_per_commit(session, repository)
    by_key: dict[tuple[CaseId, str], list[sa.Row[Any]]] = {}
    for row in rows:
        by_key.setdefault((row.case, row.target), []).append(row)
    out = []
    for (case_id, target), points in sorted(by_key.items(), key=lambda item: (str(item[0][0]), item[0][1])):
        newest = max(points, key=lambda r: (r.generation, r.committed_at, r.commit_pk))   # history.HISTORY_ORDER
        out.append(CompileSeriesOut(case_id=case_id, target=target, commits=len(points), latest=_values(newest)))
    return out


def compile_history(session: Session, repository: str, case_id: CaseId | str, target: str) -> list[CompilePointOut]:
    """The series' values along the default-branch history (`history.default_branch_chain`), oldest
    first; when the repository has no default-branch history yet, every commit in `history.HISTORY_ORDER`
    (by ancestry, then commit time)."""
    rows = newest_per_commit(session, repository, case_id=case_id, target=target)
    repo_id = session.scalar(sa.select(Repository.id).where(Repository.name == repository))
    chain = default_branch_chain(session, repo_id) if repo_id is not None else []
    by_commit = {row.commit_pk: row for row in rows}
    ordered = ([by_commit[c.id] for c in chain if c.id in by_commit] if chain
               else sorted(rows, key=lambda r: (r.generation, r.committed_at, r.commit_pk)))
    return [CompilePointOut(sha=r.sha, committed_at=r.committed_at, status=r.status, values=_values(r))
            for r in ordered]


def compile_steps(history: Sequence[CompilePointOut]) -> list[CompileStepOut]:
    """The change points of a compile series (module doc): each compared metric's value at each
    built commit of `history` (oldest first) that differs from the previous built commit's, in
    history order. A failed build is skipped: the step is measured across it."""
    steps = []
    previous: CompilePointOut | None = None
    for point in history:
        if point.status != "built":
            continue
        if previous is not None:
            for metric in COMPARED_METRICS:
                before, after = previous.values[metric], point.values[metric]
                if before != after:
                    steps.append(CompileStepOut(metric=metric, before_sha=previous.sha, after_sha=point.sha,
                                                before=before, after=after, change=relative_change(after, before)))
        previous = point
    return steps


def compile_changes(session: Session, repository: str, *, head_sha: str, base_sha: str) -> list[CompileChangeOut]:
    """Each compared metric (`COMPARED_METRICS`) of each (case, target) compiled at both commits
    whose value differs between them, sorted by case, target and metric."""
    return _changes(session, repository, head_sha=head_sha, base_sha=base_sha)[0]


def _changes(session: Session, repository: str, *, head_sha: str, base_sha: str) -> tuple[list[CompileChangeOut], int]:
    """compile_changes, and how many (case, target) pairs were built at both commits."""
    commits = dict(session.execute(
        sa.select(Commit.sha, Commit.id).join(Repository, Commit.repository_id == Repository.id)
        .where(Repository.name == repository, Commit.sha.in_([head_sha, base_sha]))).all())
    if head_sha not in commits or base_sha not in commits:
        return [], 0
    rows = newest_per_commit(session, repository, commit_ids=[commits[head_sha], commits[base_sha]])
    head = {(r.case, r.target): r for r in rows if r.commit_pk == commits[head_sha] and r.status == "built"}
    base = {(r.case, r.target): r for r in rows if r.commit_pk == commits[base_sha] and r.status == "built"}
    changes = []
    for key in sorted(head.keys() & base.keys(), key=lambda k: (str(k[0]), k[1])):
        for metric in COMPARED_METRICS:
            column = METRIC_COLUMNS[metric]
            b, h = getattr(base[key], column), getattr(head[key], column)
            if b != h:
                changes.append(CompileChangeOut(case_id=key[0], target=key[1], metric=metric, base=b, head=h,
                                                change=relative_change(h, b)))
    return changes, len(head.keys() & base.keys())


def _ancestor_with_bundle(session: Session, repository: str, head_sha: str, walk: int) -> str | None:
    """The newest first-parent ancestor of `head_sha` (itself excluded), within `walk` commits,
    that has a bundle with compile statistics."""
    repo_id = session.scalar(sa.select(Repository.id).where(Repository.name == repository))
    sha: str | None = head_sha
    for _ in range(walk):
        sha = session.scalar(sa.select(CommitParent.parent_sha).join(Commit, CommitParent.commit_id == Commit.id)
                             .where(Commit.repository_id == repo_id, Commit.sha == sha, CommitParent.position == 0))
        if sha is None:
            return None
        if session.scalar(sa.select(sa.literal(True)).select_from(CompileStat)
                          .join(Bundle, CompileStat.bundle_id == Bundle.id).join(Commit, Bundle.commit_id == Commit.id)
                          .where(Commit.repository_id == repo_id, Commit.sha == sha).limit(1)):
            return sha
    return None


def compare_compile(session: Session, repository: str, *, head_sha: str, base_sha: str | None = None,
                    latency_bases: Iterable[str | None] = (), walk: int = 50) -> CompileComparisonOut:
    """The head's compile figures against the base (module doc: given, else the first of the
    latency comparisons' bases, else the newest first-parent ancestor with a bundle within `walk`
    commits)."""
    latency_base = next((b for b in latency_bases if b), None)
    base: str | None
    if base_sha is not None:
        base, source = base_sha, "given"
    elif latency_base is not None:
        base, source = latency_base, "latency base"
    else:
        found = _ancestor_with_bundle(session, repository, head_sha, walk)
        base, source = found, "first-parent ancestor" if found else "none"
    if base is None:
        return CompileComparisonOut(head_sha=head_sha, base_sha=None, base_source="none", compared=0,
                                    summary=_summary(None, 0, []), changes=[])
    changes, compared = _changes(session, repository, head_sha=head_sha, base_sha=base)
    return CompileComparisonOut(head_sha=head_sha, base_sha=base, base_source=source, compared=compared,
                                summary=_summary(base, compared, changes), changes=changes)


def compile_targets(session: Session, case_id: CaseId | str, targets: Sequence[str]) -> list[tuple[str, str]]:
    """(repository, target) of every compile series of `case_id` on one of `targets`: where a
    latency series' page links to the compile series of its case on its device class's targets."""
    rows = session.execute(
        sa.select(Repository.name, CompileStat.target).distinct()
        .join(Case, CompileStat.case_id == Case.id).join(Bundle, CompileStat.bundle_id == Bundle.id)
        .join(Repository, Bundle.repository_id == Repository.id)
        .where(Case.case_id == case_id, CompileStat.target.in_(list(targets))))
    return sorted((r.name, r.target) for r in rows)
