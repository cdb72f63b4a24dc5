"""The compare page says what the hardware counters of its changed and undecided rows did."""

from __future__ import annotations

from pathlib import Path

import requests
from sqlalchemy import Engine

from pipeline.config import Settings
from pipeline.service.app import create_app
from pipeline.results.store.db import session_scope
from tests.helpers import factories as f
from tests.helpers.live_server import live_server
from tests.helpers.stores import database_url, engine, seeded, store_url  # noqa: F401  (fixtures: SQLite and PostgreSQL)
from tests.results.store.test_counters import BASE_COUNTS, _with


def test_compare_page_lists_what_the_counters_did(seeded: Engine, tmp_path: Path) -> None:  # noqa: F811
    more_dram = {**BASE_COUNTS, "dram_read_bytes": BASE_COUNTS["dram_read_bytes"] * 1.18,
                 "dram_write_bytes": BASE_COUNTS["dram_write_bytes"] * 1.18}
    with session_scope(seeded) as s:
        f.run_and_upload(s, 0, [_with(f.ok(f.GEMM, f.series_samples(1e-3), binary="g0"), BASE_COUNTS),
                                _with(f.ok(f.CONV, f.series_samples(2e-3), binary="c0"), BASE_COUNTS)])
        f.run_and_upload(s, 1, [_with(f.ok(f.GEMM, f.series_samples(1.2e-3), binary="g1"), more_dram),
                                _with(f.ok(f.CONV, f.series_samples(2e-3), binary="c1"), BASE_COUNTS)])
    with live_server(create_app(Settings(home=tmp_path, web={"secret_key": "test-secret"}), seeded)) as url:
        page = requests.get(f"{url}/compare", params={"repository": f.REPO, "head": f.sha(1)}, timeout=30)
    assert page.status_code == 200, page.text[-500:]
    assert "Hardware counters" in page.text
    assert f'{f.GEMM}</span>: DRAM bytes +18 %, instructions +0 %' in page.text
    assert f"{f.CONV}</span>:" not in page.text   # similar: its counters are not listed
