"""The roofline of a device class: each latency series' latest median placed by its case's FLOPs
and bytes per call, and the series that cannot be placed, with why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.contracts.ids import CaseId
from pipeline.contracts.metrics import LATENCY
from pipeline.results.store.history import commit_level
from pipeline.results.store.models import (
    Bundle,
    Case,
    CaseResultRow,
    Commit,
    CompileStat,
    DeviceClassRow,
    Job,
    Measurement,
    Run,
    Series,
)

__all__ = ["LeftOffRoofline", "RooflinePoint", "latest_medians", "roofline_points"]


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
