"""A latency series' page and the API show the case's hardware counters along the same history (issue 32):
per commit in ancestry order, the commits where a counter moved beyond its tolerance marked, a commit
without counters saying why; on SQLite and PostgreSQL, stored through the ingest, read over HTTP."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import requests
import sqlalchemy as sa
from sqlalchemy import Engine

from pipeline.config import Settings
from pipeline.service.app import create_app
from pipeline.results.store import ingest
from pipeline.results.store.db import session_scope
from pipeline.results.store.models import Case, DeviceClassRow, Series
from tests.helpers import factories as f
from tests.helpers.live_server import live_server
from tests.helpers.stores import database_url, engine, seeded, store_url  # noqa: F401  (fixtures: SQLite and PostgreSQL)
from tests.results.store.test_counters import BASE_COUNTS, _with

NCU_MISSING = "not available: ncu (Nsight Compute) not found on PATH"
REFUSED = 'refused: perf_event_open: <script>window.__x = 1</script> (kernel.perf_event_paranoid=4)'


def _store_history(store: Engine) -> None:
    """GEMM along c0 <- c1 <- c2 <- c3 <- c4 (c4 committed before all the others: ancestry, not time, orders
    them) and a pull request's commit off the history; CONV never has counters (no profiler on the host)."""
    with session_scope(store) as s:
        ingest.record_commits(s, repository=f.REPO, commits=[
            f.commit(4, 3, minutes=-30), f.commit("pr", 3, minutes=10, pull_request=5)])
    one_more = {**BASE_COUNTS, "instructions": BASE_COUNTS["instructions"] + 1,        # exact: a step
                "dram_read_bytes": BASE_COUNTS["dram_read_bytes"] * 1.005}              # within 1 %: none
    more_dram = {**one_more, "dram_read_bytes": BASE_COUNTS["dram_read_bytes"] * 1.18,  # against c2's: a step
                 "l2_hit_rate": 50.0}                                                   # -11.25 points: a step
    gemm = {0: _with(f.ok(f.GEMM, f.series_samples(1e-3)), BASE_COUNTS),
            1: _with(f.ok(f.GEMM, f.series_samples(1e-3)), BASE_COUNTS),
            2: _with(f.ok(f.GEMM, f.series_samples(1e-3)), one_more),
            3: _with(f.ok(f.GEMM, f.series_samples(1e-3)), note=REFUSED),
            4: _with(f.ok(f.GEMM, f.series_samples(1.2e-3)), more_dram)}
    with session_scope(store) as s:
        for label, result in gemm.items():
            f.upload(s, label, [result, _with(f.ok(f.CONV, f.series_samples(2e-3)), note=NCU_MISSING)], kind="push")
        f.upload(s, "pr", [_with(f.ok(f.GEMM, f.series_samples(1e-3)), {**BASE_COUNTS, "instructions": 5.0})],
                 kind="pr")


def _series_id(store: Engine, case: str, metric: str = "latency") -> int:
    with session_scope(store) as s:
        return int(s.scalar(sa.select(Series.id).join(Case).join(DeviceClassRow)
                            .where(Case.case_id == case, DeviceClassRow.name == f.DEVICE_CLASS,
                                   Series.metric == metric)))


def _table_rows(page: str, table_id: str) -> list[str]:
    table = re.search(rf'<table id="{table_id}">(.*?)</table>', page, re.S)
    assert table, f"no table {table_id}"
    return re.findall(r"<tr[^>]*>.*?</tr>", table.group(1), re.S)[1:]


def test_series_page_and_api_show_the_counters_along_history(seeded: Engine, tmp_path: Path) -> None:  # noqa: F811
    _store_history(seeded)
    gemm_series, conv_series = _series_id(seeded, f.GEMM), _series_id(seeded, f.CONV)
    history = [f.sha(i) for i in range(5)]
    with live_server(create_app(Settings(home=tmp_path, web={"secret_key": "test-secret"}), seeded)) as url:
        got = requests.get(f"{url}/api/v1/counter-series", params={"case": f.GEMM, "device_class": f.DEVICE_CLASS},
                           timeout=30)
        detail = requests.get(f"{url}/api/v1/series/{gemm_series}", timeout=30)
        conv = requests.get(f"{url}/api/v1/counter-series", params={"case": f.CONV, "device_class": f.DEVICE_CLASS},
                            timeout=30)
        unknown = [requests.get(f"{url}/api/v1/counter-series", params=params, timeout=30) for params in (
            {"case": "gemm/nope/1x1x1/f32/iree", "device_class": f.DEVICE_CLASS},
            {"case": f.GEMM, "device_class": "no-such-class"},
            {"case": f.GEMM, "device_class": "other-cpu"})]   # both known, never measured together
        openapi = requests.get(f"{url}/openapi.json", timeout=30).json()
        page = requests.get(f"{url}/series/{gemm_series}", timeout=30)
        conv_page = requests.get(f"{url}/series/{conv_series}", timeout=30)
        # a counter's own series shows the same counters (they are the case's, whatever the metric)
        counter_page = requests.get(f"{url}/series/{_series_id(seeded, f.GEMM, 'instructions')}", timeout=30)

    assert got.status_code == 200, got.text[-500:]
    doc: dict[str, Any] = got.json()
    assert [p["sha"] for p in doc["history"]] == history   # ancestry; the pull request's commit is not history
    assert list(doc["units"]) == list(BASE_COUNTS) and doc["units"]["instructions"] == "instr"
    points = {p["sha"]: p for p in doc["history"]}
    assert points[f.sha(2)]["values"]["instructions"] == 1_000_001.0 and points[f.sha(2)]["note"] is None
    assert points[f.sha(2)]["profiler"] == "ncu 2025.3.1.0" and points[f.sha(2)]["readings"] == 1
    assert points[f.sha(3)]["values"] == {} and points[f.sha(3)]["note"] == REFUSED
    steps = [(s["counter"], s["before_sha"], s["after_sha"]) for s in doc["steps"]]
    assert steps == [("instructions", f.sha(1), f.sha(2)),                  # +1 instruction is a change
                     ("dram_read_bytes", f.sha(2), f.sha(4)),               # against the previous commit with it
                     ("l2_hit_rate", f.sha(2), f.sha(4))]
    assert doc["steps"][1]["change"] == pytest.approx(1.18 / 1.005 - 1)
    assert doc["summary"].startswith("counters at 4 of 5 commits (ncu 2025.3.1.0), 3 steps: instructions at "
                                     f"{f.sha(2)[:10]}, DRAM bytes read at {f.sha(4)[:10]}")
    assert doc["summary"].endswith(f"; none at 1: {REFUSED}")

    assert detail.status_code == 200 and detail.json()["counters"] == doc   # the series' own document carries them
    assert conv.status_code == 200 and conv.json()["units"] == {} and conv.json()["steps"] == []
    assert {p["note"] for p in conv.json()["history"]} == {NCU_MISSING}
    assert conv.json()["summary"] == f"no counters at any of 5 commits: {NCU_MISSING}"
    for answer in unknown:
        assert answer.status_code == 404 and answer.headers["content-type"].startswith("application/json")
        assert answer.json()["error"].startswith("no series of ")

    operation = openapi["paths"]["/api/v1/counter-series"]["get"]
    assert operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/CounterHistoryOut")
    assert operation["responses"]["404"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
    assert "counters" in openapi["components"]["schemas"]["SeriesDetailOut"]["required"]

    assert page.status_code == 200, page.text[-500:]
    text = page.text
    assert "Hardware counters" in text and text.count('class="step-chart counter-chart"') == len(BASE_COUNTS)
    rows = _table_rows(text, "counters")
    assert [re.search(r'<td class="mono">(?:<a [^>]*>)?([0-9a-f]{10})', r).group(1) for r in rows] == \
        [sha[:10] for sha in reversed(history)]   # newest first, as the values table
    by_sha = dict(zip(reversed(history), rows, strict=True))
    assert 'class="marked"' in by_sha[f.sha(4)] and 'class="marked"' in by_sha[f.sha(2)]
    assert "marked" not in by_sha[f.sha(1)] and "marked" not in by_sha[f.sha(0)]
    assert "1,000,001 instr" in by_sha[f.sha(2)] and "+1 instr" in by_sha[f.sha(2)]
    assert "-11.2 pt" in by_sha[f.sha(4)] and "+17.4 %" in by_sha[f.sha(4)]
    assert "no counters: refused: perf_event_open: &lt;script&gt;window.__x = 1&lt;/script&gt;" in by_sha[f.sha(3)]
    assert "<script>window.__x" not in text   # the note is text, never markup
    assert f.sha("pr")[:10] not in text

    assert conv_page.status_code == 200
    assert f"no counters at any of 5 commits: {NCU_MISSING}" in conv_page.text
    assert 'class="step-chart counter-chart"' not in conv_page.text
    assert [NCU_MISSING in r for r in _table_rows(conv_page.text, "counters")] == [True] * 5

    assert counter_page.status_code == 200 and len(_table_rows(counter_page.text, "counters")) == 5
