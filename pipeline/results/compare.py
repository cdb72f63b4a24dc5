"""Compare a commit with its base on one device class (DESIGN.md, "Analysis": PR verdict).

The base is the newest first-parent ancestor with results on that device class. Per case and
target, the newest measurement of each commit is used, with all its samples; the verdict is
`stats.verdict` (rank test plus minimum magnitude) in the metric's direction.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.config import CompareSettings
from pipeline.contracts import METRICS
from pipeline.results.models import (
    Case,
    CaseResultRow,
    Commit,
    CommitParent,
    DeviceClassRow,
    Job,
    Measurement,
    Repository,
    Run,
    Sample,
    Series,
)
from pipeline.results.stats import verdict

METRIC = "latency"
STATUSES = ("regressed", "improved", "similar", "insufficient data", "errored", "no baseline")


class CompareError(LookupError):
    """The repository, commit or device class asked for is not in the store."""


@dataclass(frozen=True)
class ComparisonRow:
    case_id: str
    target: str
    model: str
    base_median: float | None
    head_median: float | None
    change: float | None
    pvalue: float | None
    status: str


@dataclass
class Comparison:
    repository: str
    head_sha: str
    base_sha: str | None
    device_class: str
    rows: list[ComparisonRow] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def _commit(session: Session, repository: str, sha: str) -> Commit:
    commit = session.scalar(
        sa.select(Commit).join(Repository, Commit.repository_id == Repository.id)
        .where(Repository.name == repository, Commit.sha == sha))
    if commit is None:
        raise CompareError(f"commit {sha} of {repository} is not recorded")
    return commit


def _device_class_id(session: Session, name: str) -> int:
    dc_id = session.scalar(sa.select(DeviceClassRow.id).where(DeviceClassRow.name == name))
    if dc_id is None:
        raise CompareError(f"unknown device class {name!r}")
    return dc_id


def _has_measurement(session: Session, commit_id: int, device_class_id: int) -> bool:
    return session.scalar(
        sa.select(sa.literal(True)).select_from(Measurement).join(Series, Measurement.series_id == Series.id)
        .where(Measurement.commit_id == commit_id, Series.device_class_id == device_class_id, Series.metric == METRIC)
        .limit(1)) is not None


def find_base(session: Session, *, repository: str, sha: str, device_class: str, walk: int) -> str | None:
    """The first of up to `walk` first-parent ancestors of `sha` (its parent first) that has a
    latency measurement on `device_class`; None when there is none, or the walk reaches a commit
    the store has not recorded. Raises CompareError when `sha` itself is not recorded."""
    dc_id = _device_class_id(session, device_class)
    commit = _commit(session, repository, sha)
    for _ in range(walk):
        parent_sha = session.scalar(
            sa.select(CommitParent.parent_sha).where(CommitParent.commit_id == commit.id, CommitParent.position == 0))
        if parent_sha is None:
            return None
        parent = session.scalar(
            sa.select(Commit).where(Commit.repository_id == commit.repository_id, Commit.sha == parent_sha))
        if parent is None:
            return None
        if _has_measurement(session, parent.id, dc_id):
            return parent.sha
        commit = parent
    return None


@dataclass(frozen=True)
class _Latest:
    status: str
    measurement_id: int | None
    median: float | None


def _latest_results(session: Session, commit_id: int, device_class_id: int) -> dict[tuple[int, str], _Latest]:
    """(cases.id, target) -> the newest case result of that commit on that device class, with its
    latency measurement when it is ok. Newest = the highest id (the last stored)."""
    rows = session.execute(
        sa.select(CaseResultRow.case_id, CaseResultRow.target, CaseResultRow.status, Measurement.id, Measurement.median)
        .join(Job, CaseResultRow.job_id == Job.id)
        .join(Run, Job.run_id == Run.id)
        .outerjoin(Measurement, Measurement.case_result_id == CaseResultRow.id)
        .where(Run.commit_id == commit_id, Job.device_class_id == device_class_id)
        .order_by(CaseResultRow.id)
    ).all()
    latest: dict[tuple[int, str], _Latest] = {}
    for case_pk, target, status, measurement_id, median in rows:
        latest[(case_pk, target)] = _Latest(status, measurement_id, median)
    return latest


def _samples(session: Session, measurement_ids: list[int]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {m: [] for m in measurement_ids}
    if not measurement_ids:
        return out
    for m_id, value in session.execute(
        sa.select(Sample.measurement_id, Sample.value).where(Sample.measurement_id.in_(measurement_ids))
        .order_by(Sample.measurement_id, Sample.idx)
    ):
        out[m_id].append(value)
    return out


def compare(
    session: Session,
    *,
    repository: str,
    head_sha: str,
    device_class: str,
    settings: CompareSettings,
    base_sha: str | None = None,
) -> Comparison:
    """Compare head with base (found by `find_base` when not given) on one device class.

    One row per (case, target) that head has a result for, skipped cases left out:
    errored (head wrong/error), no baseline (no base commit, or base has no ok measurement of it),
    else the verdict of `stats.verdict` with the settings' thresholds. Rows sorted by case, target.
    """
    dc_id = _device_class_id(session, device_class)
    head = _commit(session, repository, head_sha)
    if base_sha is None:
        base_sha = find_base(session, repository=repository, sha=head_sha, device_class=device_class,
                             walk=settings.ancestor_walk)
    base = _commit(session, repository, base_sha) if base_sha is not None else None

    head_results = {k: v for k, v in _latest_results(session, head.id, dc_id).items() if v.status != "skipped"}
    base_results = {
        k: v for k, v in (_latest_results(session, base.id, dc_id) if base else {}).items()
        if v.measurement_id is not None
    }
    cases = {
        pk: (text, model) for pk, text, model in session.execute(
            sa.select(Case.id, Case.case_id, Case.model).where(Case.id.in_({k[0] for k in head_results}))
        )
    } if head_results else {}
    wanted = [v.measurement_id for k, v in head_results.items() if v.measurement_id is not None and k in base_results]
    wanted += [base_results[k].measurement_id for k, v in head_results.items()
               if v.measurement_id is not None and k in base_results]
    samples = _samples(session, [m for m in wanted if m is not None])
    lower_is_better = METRICS[METRIC].lower_is_better

    rows = []
    for key, h in head_results.items():
        case_text, model = cases[key[0]]
        b = base_results.get(key)
        base_median = b.median if b else None
        if h.status in ("wrong", "error"):
            rows.append(ComparisonRow(case_text, key[1], model, base_median, None, None, None, "errored"))
            continue
        if b is None or h.measurement_id is None or b.measurement_id is None:
            rows.append(ComparisonRow(case_text, key[1], model, None, h.median, None, None, "no baseline"))
            continue
        v = verdict(samples[b.measurement_id], samples[h.measurement_id], lower_is_better=lower_is_better,
                    min_change=settings.min_change, max_pvalue=settings.max_pvalue, min_samples=settings.min_samples)
        rows.append(ComparisonRow(case_text, key[1], model, b.median, h.median, v.change, v.pvalue, v.status))
    rows.sort(key=lambda r: (r.case_id, r.target))
    counts = Counter(r.status for r in rows)
    return Comparison(
        repository=repository, head_sha=head_sha, base_sha=base_sha, device_class=device_class, rows=rows,
        counts={s: counts.get(s, 0) for s in STATUSES},
    )
