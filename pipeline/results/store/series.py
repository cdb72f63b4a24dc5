"""Series as the pages look them up: a case's latency series on device classes, a suite series'
vendor control, one commit's samples on a series, the values the dashboard's filters offer, and the
device classes that have series."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.contracts.arrays import from_blob
from pipeline.contracts.ids import CaseId
from pipeline.contracts.metrics import LATENCY
from pipeline.results.store.compare import CONTROL_IMPL
from pipeline.results.store.models import Case, Commit, DeviceClassRow, Measurement, Series

__all__ = ["commit_samples", "control_series", "dashboard_options", "device_class_names", "device_class_targets",
           "latency_series_ids", "registered_targets", "set_series_settings"]


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


def device_class_targets(session: Session, name: str) -> list[str]:
    """The targets of a device class by name (none for an unknown one)."""
    return list(session.scalar(sa.select(DeviceClassRow.targets).where(DeviceClassRow.name == name)) or [])


def registered_targets(session: Session, names: Sequence[str]) -> dict[str, list[str]]:
    """device class -> its targets, for those of `names` the store has registered."""
    return {name: list(targets) for name, targets in session.execute(
        sa.select(DeviceClassRow.name, DeviceClassRow.targets).where(DeviceClassRow.name.in_(list(names))))}


def device_class_names(session: Session) -> list[str]:
    """Every registered device class's name, sorted."""
    return list(session.scalars(sa.select(DeviceClassRow.name).order_by(DeviceClassRow.name)))


def set_series_settings(session: Session, series_id: int, *, min_magnitude: float | None,
                        lower_is_better: bool | None) -> bool:
    """Store a series' minimum magnitude and direction (None: the default); False: no such series."""
    row = session.get(Series, series_id)
    if row is None:
        return False
    row.min_magnitude, row.lower_is_better = min_magnitude, lower_is_better
    session.flush()
    return True
