"""Read queries only the pages need (the rest come from `pipeline.store.queries`): plain data out."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.contracts.arrays import from_blob
from pipeline.contracts.ids import CaseId
from pipeline.contracts.metrics import LATENCY
from pipeline.store.compare import CONTROL_IMPL
from pipeline.store.history import HISTORY_ORDER, commit_level
from pipeline.store.models import (
    Bundle,
    Case,
    CaseResultRow,
    Commit,
    CompileStat,
    DeviceClassRow,
    Job,
    Measurement,
    Repository,
    Run,
    Series,
    TriageEvent,
)
from pipeline.store.triage import TriageEventOut, event_out

SHORT_ID_MIN = 4
"""Shortest id prefix a page accepts for a run or a job (pages show their first 12 characters)."""


def run_case_ids(session: Session, run_id: str) -> dict[str, set[CaseId]]:
    """device class -> the case ids the run's jobs stored results for (what the run did)."""
    found: dict[str, set[CaseId]] = {}
    rows = session.execute(
        sa.select(DeviceClassRow.name, Case.case_id).distinct()
        .join(Job, Job.device_class_id == DeviceClassRow.id)
        .join(CaseResultRow, CaseResultRow.job_id == Job.id).join(Case, Case.id == CaseResultRow.case_id)
        .where(Job.run_id == run_id))
    for device_class, case_id in rows:
        found.setdefault(device_class, set()).add(case_id)
    return found


def ids_starting_with(session: Session, model: type[Run] | type[Job], text: str) -> list[str]:
    """The run or job ids `text` names: itself when it is one, else those it is a prefix of
    (at least SHORT_ID_MIN characters; at most two are returned: two mean ambiguous)."""
    if session.get(model, text) is not None:
        return [text]
    if len(text) < SHORT_ID_MIN:
        return []
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return list(session.scalars(sa.select(model.id).where(model.id.like(escaped + "%", escape="\\"))
                                .order_by(model.id).limit(2)))


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    message: str
    author: str
    url: str | None
    """the repository's URL (the commit's page is built from it)"""


def commit_infos(session: Session, shas: Iterable[str]) -> dict[str, CommitInfo]:
    """sha -> message, author and repository URL (of the first repository that recorded it)."""
    wanted = sorted(set(shas))
    out: dict[str, CommitInfo] = {}
    for chunk in range(0, len(wanted), 500):
        for sha, message, author, url in session.execute(
            sa.select(Commit.sha, Commit.message, Commit.author, Repository.url)
            .join(Repository, Commit.repository_id == Repository.id)
            .where(Commit.sha.in_(wanted[chunk:chunk + 500])).order_by(Repository.id)
        ):
            out.setdefault(sha, CommitInfo(sha, message, author, url))
    return out


def latency_series_ids(session: Session, device_classes: Sequence[str],
                       case_ids: Collection[CaseId] | None = None) -> dict[tuple[CaseId, str], int]:
    """(case id, device class) -> the latency series' id, on those device classes (and of those
    cases only, when given: a page links the rows it shows, not the whole store)."""
    if not device_classes or case_ids is not None and not case_ids:
        return {}
    query = (sa.select(Case.case_id, DeviceClassRow.name, Series.id).join(Case, Series.case_id == Case.id)
             .join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id)
             .where(Series.metric == LATENCY, DeviceClassRow.name.in_(list(device_classes))))
    if case_ids is not None:
        query = query.where(Case.case_id.in_(sorted(str(c) for c in case_ids)))
    return {(case_id, dc): sid for case_id, dc, sid in session.execute(query)}


def control_series(session: Session, series_id: int) -> tuple[int, CaseId] | None:
    """The vendor control of a suite series: same family, shape, dtype, device class and metric,
    impl `vendor`, the same name preferred (as `compare._mark_controls`); None for a control itself."""
    case = session.execute(
        sa.select(Case.family, Case.name, Case.shape, Case.dtype, Case.impl, Series.device_class_id, Series.metric)
        .join(Series, Series.case_id == Case.id).where(Series.id == series_id)).one_or_none()
    if case is None or case.impl == CONTROL_IMPL:
        return None
    rows = session.execute(
        sa.select(Series.id, Case.case_id, Case.name).join(Case, Series.case_id == Case.id)
        .where(Case.family == case.family, Case.shape == case.shape, Case.dtype == case.dtype,
               Case.impl == CONTROL_IMPL, Series.device_class_id == case.device_class_id,
               Series.metric == case.metric).order_by(Case.case_id)).all()
    if not rows:
        return None
    best = next((r for r in rows if r.name == case.name), rows[0])
    return best.id, best.case_id


def commit_samples(session: Session, series_id: int, sha: str) -> list[float] | None:
    """Every sample of `sha` on the series, of all its runs (oldest run first); None when it has none."""
    blobs = session.scalars(
        sa.select(Measurement.samples).join(Commit, Measurement.commit_id == Commit.id)
        .where(Measurement.series_id == series_id, Commit.sha == sha).order_by(Measurement.id)).all()
    if not blobs:
        return None
    return [sample for blob in blobs for sample in from_blob(blob)]


def triage_histories(session: Session, change_point_ids: Sequence[int]) -> dict[int, list[TriageEventOut]]:
    """change point id -> its triage events, oldest first: one query."""
    out: dict[int, list[TriageEventOut]] = {i: [] for i in change_point_ids}
    if not out:
        return out
    for e in session.scalars(sa.select(TriageEvent).where(TriageEvent.change_point_id.in_(list(out)))
                             .order_by(TriageEvent.at, TriageEvent.id)):
        out[e.change_point_id].append(event_out(e))
    return out


def store_version(session: Session) -> tuple[int | None, ...]:
    """Changes whenever results or commits are added: the newest case result, measurement and commit
    ids (each a primary key's maximum: an index lookup on both stores)."""
    return tuple(session.execute(sa.select(
        sa.select(sa.func.max(CaseResultRow.id)).scalar_subquery(),
        sa.select(sa.func.max(Measurement.id)).scalar_subquery(),
        sa.select(sa.func.max(Commit.id)).scalar_subquery())).one())


def dashboard_options(session: Session) -> dict[str, list[str]]:
    """The values the dashboard's filters offer: families, device classes, dtypes and impls that
    have series (from the small cases and device-class tables, not the series' states)."""
    with_series = sa.select(Series.case_id).distinct().scalar_subquery()
    cases = session.execute(sa.select(Case.family, Case.dtype, Case.impl).distinct()
                            .where(Case.id.in_(with_series))).all()
    classes = session.scalars(sa.select(DeviceClassRow.name).where(
        DeviceClassRow.id.in_(sa.select(Series.device_class_id).distinct().scalar_subquery()))).all()
    return {"family": sorted({c.family for c in cases}), "device_class": sorted(classes),
            "dtype": sorted({c.dtype for c in cases}), "impl": sorted({c.impl for c in cases})}


def repositories(session: Session) -> list[str]:
    return list(session.scalars(sa.select(Repository.name).order_by(Repository.name)))


def device_class_targets(session: Session, name: str) -> list[str]:
    """The targets of a device class by name (none for an unknown one)."""
    return list(session.scalar(sa.select(DeviceClassRow.targets).where(DeviceClassRow.name == name)) or [])


def device_class_names(session: Session) -> list[str]:
    return list(session.scalars(sa.select(DeviceClassRow.name).order_by(DeviceClassRow.name)))


def pull_request_head(session: Session, repository: str, number: int) -> str | None:
    """The newest recorded commit of pull request `number`."""
    return session.scalar(
        sa.select(Commit.sha).join(Repository, Commit.repository_id == Repository.id)
        .where(Repository.name == repository, Commit.pull_request == number)
        .order_by(*(column.desc() for column in HISTORY_ORDER)).limit(1))


# --- roofline ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RooflinePoint:
    series_id: int
    case_id: CaseId
    median: float
    flops: int
    bytes: int

    @property
    def flop_rate(self) -> float:
        return self.flops / self.median

    @property
    def byte_rate(self) -> float:
        return self.bytes / self.median

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes if self.bytes else None

    def share_of_roof(self, peak_flops: float | None, peak_bytes: float | None) -> float | None:
        """Achieved FLOP/s over the roof at this intensity: min(compute ceiling, intensity x bandwidth)."""
        if not peak_flops or not peak_bytes or not self.intensity:
            return None
        return self.flop_rate / min(peak_flops, self.intensity * peak_bytes)


@dataclass(frozen=True)
class LeftOffRoofline:
    """A latency series of the device class the roofline cannot place, and why."""

    series_id: int
    case_id: CaseId
    reason: str


def roofline_points(session: Session, device_class: str) -> tuple[list[RooflinePoint], list[LeftOffRoofline]]:
    """Each latency series of the device class with its latest median and its case's FLOPs and
    bytes per call (the newest bundle's, on one of the device class's targets); and the series left
    off, each with its reason (no FLOPs counted: data movement; no counts in its bundle)."""
    dc = session.execute(sa.select(DeviceClassRow.id, DeviceClassRow.targets)
                         .where(DeviceClassRow.name == device_class)).one_or_none()
    if dc is None:
        return [], []
    newest = (
        sa.select(CompileStat.case_id, CompileStat.flops, CompileStat.bytes,
                  sa.func.row_number().over(partition_by=CompileStat.case_id,
                                            order_by=(Bundle.created_at.desc(), CompileStat.id.desc())).label("rank"))
        .join(Bundle, CompileStat.bundle_id == Bundle.id)
        .where(CompileStat.flops.is_not(None), CompileStat.target.in_(list(dc.targets)))
        .subquery()
    )
    work = {case_pk: (flops, nbytes) for case_pk, flops, nbytes in session.execute(
        sa.select(newest.c.case_id, newest.c.flops, newest.c.bytes).where(newest.c.rank == 1))}
    out, left = [], []
    for sid, case_pk, case_id, median in latest_medians(session, device_class_id=dc.id, metric=LATENCY):
        if case_pk not in work:
            left.append(LeftOffRoofline(sid, case_id, "no FLOP and byte counts in its bundle"))
        elif not work[case_pk][0]:
            left.append(LeftOffRoofline(sid, case_id, "no FLOPs counted (moves data only)"))
        elif not median:
            left.append(LeftOffRoofline(sid, case_id, "no latency measured"))
        else:
            out.append(RooflinePoint(sid, case_id, median, *work[case_pk]))
    return sorted(out, key=lambda p: str(p.case_id)), sorted(left, key=lambda p: str(p.case_id))


def latest_medians(session: Session, *, device_class_id: int, metric: str) -> list[tuple[int, int, CaseId, float]]:
    """(series id, case pk, case id, median at the newest measured commit) of each series of a
    device class and metric.

    The commits with results on the device class (from its jobs: a few rows per run) are walked
    newest first, in batches of growing size, taking each series' measurement from the first
    commit that has one; nearly always the newest commit holds every series and one batch does.
    Reading the newest measurement of every series over the whole history instead costs a sort of
    the device class's history (100,000 rows for 2,000 cases x 50 commits: ~250 ms on PostgreSQL).
    Newest: by ancestry (`history.HISTORY_ORDER`), then commit time, then the newer commit row; the
    commit's runs there combined (`history.commit_level`).
    """
    commits = list(session.scalars(
        sa.select(Commit.id).join(Run, Run.commit_id == Commit.id).join(Job, Job.run_id == Run.id)
        .where(Job.device_class_id == device_class_id).group_by(Commit.id)
        .order_by(sa.func.max(Commit.generation).desc(), sa.func.max(Commit.committed_at).desc(), Commit.id.desc())))
    position = {commit_pk: i for i, commit_pk in enumerate(commits)}
    remaining = set(session.scalars(sa.select(Series.id).where(Series.device_class_id == device_class_id,
                                                                 Series.metric == metric)))
    out: list[tuple[int, int, CaseId, float]] = []
    start, batch = 0, 1
    while remaining and start < len(commits):
        chunk = commits[start:start + batch]
        rows = session.execute(
            sa.select(Measurement.series_id, Series.case_id, Case.case_id, Measurement.median, Measurement.commit_id,
                      Job.run_id)
            .join(Series, Series.id == Measurement.series_id).join(Case, Series.case_id == Case.id)
            .join(CaseResultRow, Measurement.case_result_id == CaseResultRow.id)
            .join(Job, CaseResultRow.job_id == Job.id)
            .where(Measurement.commit_id.in_(chunk), Series.device_class_id == device_class_id,
                   Series.metric == metric)).all()
        newest: dict[int, list[Any]] = {}   # each series' measurements at its newest commit: all its runs
        for row in sorted(rows, key=lambda r: position[r[4]]):
            if row[0] in remaining and (row[0] not in newest or newest[row[0]][0][4] == row[4]):
                newest.setdefault(row[0], []).append(row)
        for sid, measured in newest.items():
            remaining.discard(sid)
            out.append((sid, measured[0][1], measured[0][2],
                        float(commit_level((m[5], m[3]) for m in measured)[0])))
        start, batch = start + batch, batch * 4
    return out
