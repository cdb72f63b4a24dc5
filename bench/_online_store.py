"""The store's online path for bench/detection_quality.py: series fed one commit at a time through
`ingest.ingest_result` (push runs, the default analysis settings, a real SQLite store), and what the
store holds after each commit read back."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import sqlalchemy as sa
from store_scale import _entry  # the same synthetic bundle entry as the store-scale bench

from pipeline.config import AnalysisSettings
from pipeline.contracts import BundleManifest, CaseResult, CommitInfo, Correctness, DeviceClass, DeviceInfo
from pipeline.contracts import ResultDocument
from pipeline.contracts.result import AgentInfo
from pipeline.results.store import ingest
from pipeline.results.store.db import open_store, session_scope
from pipeline.results.store.models import Case, ChangePoint, Commit, Series
from pipeline.results.analysis.stats import summarize

REPO = "bench/detection"
TARGET = "llvm-cpu:x86_64"
DEVICE_CLASS = "cpu-detection"
T0 = datetime(2026, 11, 1, tzinfo=UTC)
SCALE = 1e-5
"""Series values (around 100) to seconds."""

Timeline = list[list[tuple[int, str, str, int]]]
"""Per commit (after its upload): the stored change points that stand, (index, lifecycle, direction,
row id); a point that moves to a neighbouring commit keeps its row (and its alert)."""


def _sha(i: int) -> str:
    return f"{i:040x}"


def online_timelines(series: Sequence[np.ndarray], settings: AnalysisSettings | None = None) -> list[Timeline]:
    """Feed every series one commit at a time into a fresh store (one document per commit with one
    case per series); returns each series' timeline. All series must have the same length."""
    settings = settings or AnalysisSettings()
    length = len(series[0])
    cases = [f"gemm/series-{k:04d}/64x64x64/f32/iree" for k in range(len(series))]
    correctness = Correctness(passed=True, max_abs_error=1e-6, max_rel_error=1e-5, atol=1e-3, rtol=1e-3)
    timelines: list[Timeline] = [[] for _ in series]
    with tempfile.TemporaryDirectory() as tmp:
        engine = open_store(f"sqlite:///{Path(tmp) / 'store.db'}")
        with session_scope(engine) as s:
            ingest.upsert_repository(s, name=REPO)
            ingest.record_commits(s, repository=REPO, commits=[
                CommitInfo(sha=_sha(i), parents=[_sha(i - 1)] if i else [], message=f"commit {i}",
                           author="dev <dev@example.com>", committed_at=T0 + timedelta(hours=i), branch="main")
                for i in range(length)])
            ingest.upsert_device_class(s, DeviceClass(name=DEVICE_CLASS, kind="cpu", targets=[TARGET], runtime="iree",
                                                      hal_driver="local-sync", description="detection bench"))
            ingest.ingest_manifest(s, manifest=BundleManifest(
                repository=REPO, commit=_sha(0), suite_path="kernels", suite_digest="d" * 40, created_at=T0,
                compilers={"iree": "3.13.0"}, targets=[TARGET], entries=[_entry(c) for c in cases]), path="/b/0")
        for i in range(length):
            with session_scope(engine) as s:
                run = ingest.create_run(s, repository=REPO, commit_sha=_sha(i), kind="push",
                                        device_classes=[DEVICE_CLASS])
                results = []
                for case, values in zip(cases, series, strict=True):
                    v = float(values[i]) * SCALE
                    samples = [v * 0.999, v, v * 1.001]  # median v: the series' value
                    results.append(CaseResult(case=case, target=TARGET, status="ok", samples=samples,
                                              stats=summarize(samples), correctness=correctness))
                ingest.ingest_result(s, analysis=settings, document=ResultDocument(
                    run_id=run.id, job_id=run.jobs[0].id, repository=REPO, commit=_sha(i),
                    device=DeviceInfo(device_class=DEVICE_CLASS, uid="host", name="CPU", host="bench",
                                      driver="local-sync"),
                    agent=AgentInfo(name="agent", version="0.1.0"), started_at=T0, finished_at=T0,
                    results=results))
            with session_scope(engine) as s:
                standing: dict[str, list[tuple[int, str, str, int]]] = {}
                for case_id, sha, lifecycle, direction, row_id in s.execute(
                        sa.select(Case.case_id, Commit.sha, ChangePoint.lifecycle, ChangePoint.direction,
                                  ChangePoint.id)
                        .join(Series, ChangePoint.series_id == Series.id).join(Case, Series.case_id == Case.id)
                        .join(Commit, ChangePoint.after_commit_id == Commit.id)
                        .where(ChangePoint.lifecycle != "retracted")):
                    standing.setdefault(str(case_id), []).append((int(sha, 16), lifecycle, direction, row_id))
                for k, case in enumerate(cases):
                    timelines[k].append(sorted(standing.get(case, [])))
        engine.dispose()
    return timelines
