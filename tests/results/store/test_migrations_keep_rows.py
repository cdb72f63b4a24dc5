"""Every migration, up from 0002 to the newest and back down, keeps the rows a store already holds,
on SQLite and PostgreSQL. SQLite alters a table by copying it and dropping the old one; with
foreign keys on, that drop deletes every row that references the table (ON DELETE CASCADE), so
an upgrade of a store from an older release could silently empty its history."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from pipeline.results.store.db import (
    MigrationError,
    alembic_config,
    downgrade,
    make_engine,
    migrate,
    migration_connection,
)
from tests.helpers import factories as f
from tests.helpers.stores import insert_early_rows

# the rows each table holds once seeded; a table a revision does not have yet is skipped there
SEEDED = {"repositories": 1, "commits": 2, "runs": 1, "jobs": 1, "case_results": 2, "measurements": 2,
          "samples": 3, "change_points": 1, "triage_events": 2}
# 0008 moves `samples` into arrays on `measurements` (its own test checks the values)
MOVED = {"samples"}


def _seed_0002(engine: Engine) -> None:
    with engine.begin() as c:
        insert_early_rows(c)
        c.execute(sa.text("INSERT INTO jobs (id, run_id, device_class_id, status, attempts, created_at) "
                          "VALUES ('job', 'run', 1, 'done', 1, :t)"), {"t": f.T0})
        c.execute(sa.text("INSERT INTO case_results (id, job_id, case_id, target, status) "
                          "VALUES (10, 'job', 1, 't', 'ok'), (11, 'job', 2, 't', 'ok')"))
        c.execute(sa.text("INSERT INTO measurements (id, case_result_id, series_id, commit_id, n, median, mean, stdev, "
                          "min, max) VALUES (20, 10, 1, 1, 2, 2e-3, 2e-3, 1e-3, 1e-3, 3e-3), "
                          "(21, 11, 2, 1, 1, 5e-3, 5e-3, 0, 5e-3, 5e-3)"))
        c.execute(sa.text("INSERT INTO samples (measurement_id, idx, value) VALUES (:m, :i, :v)"),
                  [{"m": 20, "i": 0, "v": 1e-3}, {"m": 20, "i": 1, "v": 3e-3}, {"m": 21, "i": 0, "v": 5e-3}])


def _seed_0003(engine: Engine) -> None:
    """A change point with its triage history: the rows 0009, 0010 and 0014 alter the table under."""
    with engine.begin() as c:
        c.execute(sa.text(
            "INSERT INTO change_points (id, series_id, before_commit_id, after_commit_id, committed_at, history_index, "
            "before_level, after_level, magnitude, pvalue, direction, state, detected_at) "
            "VALUES (1, 1, 2, 1, :t, 3, 1e-3, 2e-3, 1.0, 1e-4, 'regression', 'needs triage', :t)"), {"t": f.T0})
        c.execute(sa.text("INSERT INTO triage_events (id, change_point_id, state, who, at, note) "
                          "VALUES (1, 1, 'needs triage', 'analysis', :t, ''), (2, 1, 'assigned', 'ada', :t, 'mine')"),
                  {"t": f.T0})


def _counts(engine: Engine) -> dict[str, int]:
    tables = set(sa.inspect(engine).get_table_names())
    with engine.connect() as c:
        return {t: c.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one() for t in SEEDED if t in tables}


def _revisions() -> list[str]:
    """Every revision from the oldest to the newest."""
    return [r.revision for r in reversed(list(ScriptDirectory.from_config(alembic_config()).walk_revisions()))]


def _expected(counts: dict[str, int]) -> dict[str, int]:
    return {t: SEEDED[t] for t in counts}


def test_every_migration_up_and_down_keeps_the_rows(blank_engine: Engine) -> None:
    revisions = _revisions()
    migrate(blank_engine, "0002")
    _seed_0002(blank_engine)
    for revision in revisions[revisions.index("0003"):]:
        migrate(blank_engine, revision)
        if revision == "0003":
            _seed_0003(blank_engine)
        counts = {t: n for t, n in _counts(blank_engine).items() if t not in MOVED}
        assert counts == _expected(counts), f"rows lost upgrading to {revision}"
    with blank_engine.connect() as c:
        assert c.execute(sa.text("SELECT note FROM triage_events WHERE id = 2")).scalar_one() == "mine"

    for revision in reversed(revisions[revisions.index("0002"):-1]):
        downgrade(blank_engine, revision)
        counts = _counts(blank_engine)
        assert counts == _expected(counts), f"rows lost downgrading to {revision}"


def test_foreign_keys_are_enforced_again_after_a_migration(blank_engine: Engine) -> None:
    """The pooled connection a migration ran on goes back with its foreign keys on."""
    migrate(blank_engine, "0002")
    _seed_0002(blank_engine)
    migrate(blank_engine)
    with blank_engine.begin() as c:
        c.execute(sa.text("DELETE FROM runs WHERE id = 'run'"))  # cascades to jobs, results, measurements
    counts = _counts(blank_engine)
    assert counts["jobs"] == counts["case_results"] == counts["measurements"] == 0


def test_a_migration_that_leaves_dangling_rows_is_refused(tmp_path: Path) -> None:
    """With foreign keys off while SQLite migrates (PostgreSQL keeps enforcing them), the check before
    the commit is what keeps a store consistent: a row pointing at nothing fails the migration,
    naming the table, and is not kept."""
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        migrate(engine)
        head = _revisions()[-1]
        with pytest.raises(MigrationError, match="jobs"), migration_connection(engine) as c:
            c.execute(sa.text("INSERT INTO jobs (id, run_id, device_class_id, status, attempts, max_attempts, "
                              "created_at) VALUES ('orphan', 'no-such-run', 1, 'queued', 0, 3, :t)"), {"t": f.T0})
            c.execute(sa.text("UPDATE alembic_version SET version_num = 'next'"))   # as a migration step does
        assert _counts(engine)["jobs"] == 0
        with engine.connect() as c:
            assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == head
    finally:
        engine.dispose()


def test_alembics_own_command_keeps_the_rows_too(tmp_path: Path) -> None:
    """`alembic upgrade` without benchfarm's connection (env.py makes its own engine) goes through the
    same guarded connection."""
    from alembic import command

    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        migrate(engine, "0002")
        _seed_0002(engine)
        migrate(engine, "0003")
        _seed_0003(engine)
        command.upgrade(alembic_config(engine), "head")
        counts = {t: n for t, n in _counts(engine).items() if t not in MOVED}
        assert counts == _expected(counts)
    finally:
        engine.dispose()


def test_upgrading_from_0017_keeps_every_result_and_orders_commits_by_ancestry(blank_engine: Engine) -> None:
    """A store of the release before issue 31 (0017): commits 2 <- 1 <- 3 recorded newest first, all in one
    second, with a running local job. The upgrade keeps every row and gives each commit its
    first-parent generation (the order of history from then on); the job gets no owner (the reaper
    fails a running job with neither a lease nor an owner)."""
    migrate(blank_engine, "0017")
    with blank_engine.begin() as c:
        insert_early_rows(c)
        c.execute(sa.text("INSERT INTO jobs (id, run_id, device_class_id, status, attempts, created_at) "
                          "VALUES ('job', 'run', 1, 'running', 1, :t)"), {"t": f.T0})
        c.execute(sa.text("INSERT INTO case_results (id, job_id, case_id, target, status) "
                          "VALUES (10, 'job', 1, 't', 'ok'), (11, 'job', 2, 't', 'ok')"))
        c.execute(sa.text("INSERT INTO measurements (id, case_result_id, series_id, commit_id, n, median, mean, stdev, "
                          "min, max, samples) VALUES (20, 10, 1, 1, 1, 2e-3, 2e-3, 0, 2e-3, 2e-3, :b), "
                          "(21, 11, 2, 1, 1, 5e-3, 5e-3, 0, 5e-3, 5e-3, :b)"), {"b": b"\0" * 8})
        c.execute(sa.text("INSERT INTO commits (id, repository_id, sha, message, author, committed_at) "
                          "VALUES (3, 1, :s, '', '', :t)"), {"s": f.sha(3), "t": f.T0})
        c.execute(sa.text("INSERT INTO commit_parents (commit_id, position, parent_sha) VALUES (1, 0, :a), (3, 0, :b)"),
                  {"a": f.sha(0), "b": f.sha(1)})
    before = _counts(blank_engine)
    migrate(blank_engine)
    assert _counts(blank_engine) == before
    with blank_engine.connect() as c:
        generations = dict(c.execute(sa.text("SELECT sha, generation FROM commits")).all())
        assert c.execute(sa.text("SELECT owner FROM jobs")).all() == [(None,)]
    assert generations == {f.sha(0): 0, f.sha(1): 1, f.sha(3): 2}
