"""Read queries only the pages need (the rest come from `pipeline.results.queries`): plain data out."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.results.compare import CONTROL_IMPL
from pipeline.results.models import (
    Bundle,
    Case,
    CaseResultRow,
    Commit,
    CompileStat,
    DeviceClassRow,
    Measurement,
    Repository,
    Sample,
    Series,
    TriageEvent,
)
from pipeline.results.triage import TriageRecord

LATENCY = "latency"


def parse_case(case_id: str) -> tuple[str, str, str, str, str]:
    """(family, name, shape, dtype, impl) of a case id; missing parts are empty."""
    parts = (case_id.split("/") + [""] * 5)[:5]
    return parts[0], parts[1], parts[2], parts[3], parts[4]


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


def latency_series_ids(session: Session, device_classes: Sequence[str]) -> dict[tuple[str, str], int]:
    """(case id, device class) -> the latency series' id, on those device classes."""
    if not device_classes:
        return {}
    rows = session.execute(
        sa.select(Case.case_id, DeviceClassRow.name, Series.id).join(Case, Series.case_id == Case.id)
        .join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id)
        .where(Series.metric == LATENCY, DeviceClassRow.name.in_(list(device_classes))))
    return {(case_id, dc): sid for case_id, dc, sid in rows}


def control_series(session: Session, series_id: int) -> tuple[int, str] | None:
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
    """Every sample of the newest measurement of `sha` on the series; None when it has none."""
    measurement_id = session.scalar(
        sa.select(Measurement.id).join(Commit, Measurement.commit_id == Commit.id)
        .where(Measurement.series_id == series_id, Commit.sha == sha).order_by(Measurement.id.desc()).limit(1))
    if measurement_id is None:
        return None
    return list(session.scalars(sa.select(Sample.value).where(Sample.measurement_id == measurement_id)
                                .order_by(Sample.idx)))


def triage_histories(session: Session, change_point_ids: Sequence[int]) -> dict[int, list[TriageRecord]]:
    """change point id -> its triage events, oldest first: one query."""
    out: dict[int, list[TriageRecord]] = {i: [] for i in change_point_ids}
    if not out:
        return out
    for e in session.scalars(sa.select(TriageEvent).where(TriageEvent.change_point_id.in_(list(out)))
                             .order_by(TriageEvent.at, TriageEvent.id)):
        out[e.change_point_id].append(TriageRecord(e.id, e.change_point_id, e.state, e.who, e.at, e.bug_link,
                                                   e.assignee, e.note))
    return out


def store_version(session: Session) -> tuple[int | None, ...]:
    """Changes whenever results or commits are added: the newest case result, measurement and commit
    ids (each a primary key's maximum: an index lookup on both stores)."""
    return tuple(session.execute(sa.select(
        sa.select(sa.func.max(CaseResultRow.id)).scalar_subquery(),
        sa.select(sa.func.max(Measurement.id)).scalar_subquery(),
        sa.select(sa.func.max(Commit.id)).scalar_subquery())).one())


def repositories(session: Session) -> list[str]:
    return list(session.scalars(sa.select(Repository.name).order_by(Repository.name)))


def device_class_names(session: Session) -> list[str]:
    return list(session.scalars(sa.select(DeviceClassRow.name).order_by(DeviceClassRow.name)))


def resolve_commit(session: Session, repository: str, ref: str) -> list[str]:
    """Full shas of `repository` that `ref` names: a whole sha, or a prefix of at least 4 hex digits."""
    ref = ref.strip().lower()
    if len(ref) < 4 or any(c not in "0123456789abcdef" for c in ref):
        return []
    return list(session.scalars(
        sa.select(Commit.sha).join(Repository, Commit.repository_id == Repository.id)
        .where(Repository.name == repository, Commit.sha.startswith(ref, autoescape=True)).limit(5)))


def pull_request_head(session: Session, repository: str, number: int) -> str | None:
    """The newest recorded commit of pull request `number`."""
    return session.scalar(
        sa.select(Commit.sha).join(Repository, Commit.repository_id == Repository.id)
        .where(Repository.name == repository, Commit.pull_request == number)
        .order_by(Commit.committed_at.desc(), Commit.id.desc()).limit(1))


# --- roofline ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RooflinePoint:
    series_id: int
    case_id: str
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


def roofline_points(session: Session, device_class: str) -> list[RooflinePoint]:
    """Each latency series of the device class with its latest median and its case's FLOPs and
    bytes per call (the newest bundle's, on one of the device class's targets)."""
    dc = session.execute(sa.select(DeviceClassRow.id, DeviceClassRow.targets)
                         .where(DeviceClassRow.name == device_class)).one_or_none()
    if dc is None:
        return []
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
    if not work:
        return []
    out = []
    for sid, case_pk, case_id, median in latest_medians(session, device_class_id=dc.id, metric=LATENCY):
        if case_pk in work and work[case_pk][0] and median:
            out.append(RooflinePoint(sid, case_id, median, *work[case_pk]))
    return sorted(out, key=lambda p: p.case_id)


def latest_medians(session: Session, *, device_class_id: int, metric: str) -> list[tuple[int, int, str, float]]:
    """(series id, case pk, case id, median at the newest measured commit) of each series of a
    device class and metric. An aggregate (the newest commit time per series) and a join back, not
    a window over every measurement: no sort of the device class's whole history."""
    series = (sa.select(Series.id).where(Series.device_class_id == device_class_id, Series.metric == metric)
              .scalar_subquery())
    newest = (sa.select(Measurement.series_id, sa.func.max(Commit.committed_at).label("at"))
              .join(Commit, Measurement.commit_id == Commit.id).where(Measurement.series_id.in_(series))
              .group_by(Measurement.series_id).subquery())
    best: dict[int, tuple[tuple[int, int], int, str, float]] = {}
    for sid, case_pk, case_id, median, commit_pk, measurement_pk in session.execute(
            sa.select(Measurement.series_id, Series.case_id, Case.case_id, Measurement.median, Commit.id, Measurement.id)
            .join(Commit, Measurement.commit_id == Commit.id)
            .join(newest, sa.and_(newest.c.series_id == Measurement.series_id, newest.c.at == Commit.committed_at))
            .join(Series, Series.id == Measurement.series_id).join(Case, Series.case_id == Case.id)):
        order = (commit_pk, measurement_pk)  # ties on commit time: the newest commit row, then measurement
        if sid not in best or order > best[sid][0]:
            best[sid] = (order, case_pk, case_id, float(median))
    return [(sid, case_pk, case_id, median) for sid, (_, case_pk, case_id, median) in best.items()]
