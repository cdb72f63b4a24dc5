"""The nightly schedule with a controlled clock: once a day at `dispatch.nightly_at` (UTC), the
default-branch head on every registered device class, never twice for one day."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Engine

from pipeline.config import DispatchSettings, Settings
from pipeline.orchestration.dispatch.triggers import Nightly
from pipeline.results.store import ingest
from pipeline.results.store.db import session_scope
from pipeline.results.store.models import DeviceClassRow, Job, Run

from tests.helpers import factories as f
from tests.results.store.test_analysis import main, record_main


def _nightlies(engine: Engine) -> list[tuple[str, list[str]]]:
    with session_scope(engine) as s:
        runs = s.scalars(sa.select(Run).where(Run.kind == "nightly").order_by(Run.created_at)).all()
        return [(r.commit.sha, sorted(j.device_class.name for j in s.scalars(sa.select(Job).where(Job.run_id == r.id))))
                for r in runs]


def test_the_nightly_fires_once_a_day_on_every_device_class(seeded: Engine, tmp_path: Any) -> None:
    with session_scope(seeded) as s:
        record_main(s, 5)
        ingest.upsert_device_class(s, f.device_class("gpu-class"))
        f.upload(s, main(4), [f.ok(f.GEMM, f.series_samples(1e-3))], kind="push")   # main-4: the head
    now = datetime(2030, 3, 1, 1, 59, tzinfo=UTC)
    nightly = Nightly(Settings(home=tmp_path, repository=f.REPO, dispatch=DispatchSettings(nightly_at="02:00")),
                      seeded, clock=lambda: now)
    nightly.step()
    assert _nightlies(seeded) == []                       # 01:59: not yet
    now += timedelta(minutes=2)
    nightly.step()
    nightly.step()
    with session_scope(seeded) as s:   # every registered class: the seeded store's and gpu-class
        classes = sorted(s.scalars(sa.select(DeviceClassRow.name)))
    assert "gpu-class" in classes and f.DEVICE_CLASS in classes
    assert _nightlies(seeded) == [(f.sha(main(4)), classes)]   # 02:01: once, every class
    now += timedelta(hours=12)
    nightly.step()
    assert len(_nightlies(seeded)) == 1                   # 14:01: still today's
    now += timedelta(hours=12)
    nightly.step()
    assert _nightlies(seeded) == [(f.sha(main(4)), classes)] * 2   # the next day's


def test_no_schedule_no_run(seeded: Engine, tmp_path: Any) -> None:
    Nightly(Settings(home=tmp_path), seeded, clock=lambda: datetime(2030, 3, 1, 12, tzinfo=UTC)).step()
    assert _nightlies(seeded) == []
