"""Migration 0008 moves samples stored as rows (0007) into one array per measurement, on SQLite and
PostgreSQL, and the downgrade moves them back."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import Engine

from pipeline.contracts.arrays import from_blob
from pipeline.results.store.db import downgrade, migrate
from tests.helpers import factories as f
from tests.helpers.stores import insert_early_rows

CLOCKS = [1980.0, 1965.0, 1950.0]


def _seed_0007(engine: Engine) -> tuple[int, int, int]:
    """Rows as revision 0007 stored them: a measurement with 3 samples and clocks, one with 2 samples
    and no clocks, a paired case result with 3 base samples. Returns (measurement ids, paired result id)."""
    with engine.begin() as c:
        insert_early_rows(c)
        c.execute(sa.text("INSERT INTO jobs (id, run_id, device_class_id, status, attempts, max_attempts, created_at) "
                          "VALUES ('job', 'run', 1, 'done', 1, 3, :t)"), {"t": f.T0})
        c.execute(sa.text("INSERT INTO case_results (id, job_id, case_id, target, status, paired_base_commit_id) "
                          "VALUES (10, 'job', 1, 't', 'ok', 2), (11, 'job', 2, 't', 'ok', NULL)"))
        c.execute(sa.text("INSERT INTO measurements (id, case_result_id, series_id, commit_id, n, median, mean, stdev, "
                          "min, max) VALUES (20, 10, 1, 1, 3, 2e-3, 2e-3, 1e-3, 1e-3, 3e-3), "
                          "(21, 11, 2, 1, 2, 5e-3, 5e-3, 0, 5e-3, 5e-3)"))
        c.execute(sa.text("INSERT INTO samples (measurement_id, idx, value, clock_mhz) VALUES (:m, :i, :v, :c)"),
                  [{"m": 20, "i": 2, "v": 3e-3, "c": CLOCKS[2]}, {"m": 20, "i": 0, "v": 1e-3, "c": CLOCKS[0]},
                   {"m": 20, "i": 1, "v": 2e-3, "c": CLOCKS[1]},
                   {"m": 21, "i": 0, "v": 5e-3, "c": None}, {"m": 21, "i": 1, "v": 5.5e-3, "c": None}])
        c.execute(sa.text("INSERT INTO paired_samples (case_result_id, idx, value) VALUES (:r, :i, :v)"),
                  [{"r": 10, "i": i, "v": v} for i, v in enumerate([1.1e-3, 2.1e-3, 3.1e-3])])
    return 20, 21, 10


def test_0008_moves_sample_rows_into_arrays_and_back(blank_engine: Engine) -> None:
    migrate(blank_engine, "0007")
    with_clocks, without_clocks, paired = _seed_0007(blank_engine)
    migrate(blank_engine)
    tables = set(sa.inspect(blank_engine).get_table_names())
    assert "samples" not in tables and "paired_samples" not in tables
    with blank_engine.connect() as c:
        rows = {m: (from_blob(s), clocks) for m, s, clocks in c.execute(
            sa.text("SELECT id, samples, sample_clocks FROM measurements"))}
        assert rows[with_clocks][0] == [1e-3, 2e-3, 3e-3] and from_blob(rows[with_clocks][1]) == CLOCKS
        assert rows[without_clocks] == ([5e-3, 5.5e-3], None)
        pairs = dict(c.execute(sa.text("SELECT id, paired_samples FROM case_results")).all())
        assert from_blob(pairs[paired]) == [1.1e-3, 2.1e-3, 3.1e-3] and pairs[11] is None

    downgrade(blank_engine, "0007")
    with blank_engine.connect() as c:
        assert c.execute(sa.text("SELECT measurement_id, idx, value, clock_mhz FROM samples "
                                 "ORDER BY measurement_id, idx")).all() == [
            (20, 0, 1e-3, CLOCKS[0]), (20, 1, 2e-3, CLOCKS[1]), (20, 2, 3e-3, CLOCKS[2]),
            (21, 0, 5e-3, None), (21, 1, 5.5e-3, None)]
        assert [v for (v,) in c.execute(sa.text("SELECT value FROM paired_samples ORDER BY idx"))] == [
            1.1e-3, 2.1e-3, 3.1e-3]
