"""The database helper and the migrations: empty database -> head, no drift from the models."""

from __future__ import annotations

import subprocess
import sys
import time
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from pipeline.results.store.db import MIGRATIONS_DIR, alembic_config, make_engine, migrate, normalize_url, session_scope
from pipeline.results.store.models import ALL_TABLES, Base, Repository

EXPECTED_TABLES = {
    "repositories", "commits", "commit_parents", "device_classes", "devices", "cases", "series", "bundles",
    "compile_stats", "code_listings", "runs", "jobs", "case_results", "measurements", "api_tokens",
    "change_points", "triage_events", "users",
    "change_points", "triage_events", "agents", "build_requests", "webhook_deliveries", "run_reports",
    "bisections", "bisection_steps", "counter_values",
}


def test_models_define_the_tables_of_the_design() -> None:
    assert set(ALL_TABLES) == EXPECTED_TABLES


def test_migrations_upgrade_an_empty_database_to_the_models(blank_engine: Engine) -> None:
    assert sa.inspect(blank_engine).get_table_names() == []
    migrate(blank_engine)
    assert set(sa.inspect(blank_engine).get_table_names()) == EXPECTED_TABLES | {"alembic_version"}
    with blank_engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert context.get_current_revision() == ScriptDirectory.from_config(alembic_config()).get_current_head()
        assert compare_metadata(context, Base.metadata) == []


def test_migrate_twice_is_harmless(engine: Engine) -> None:
    migrate(engine)
    with session_scope(engine) as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Repository)) == 0


def test_drift_would_be_seen(blank_engine: Engine) -> None:
    """The drift check is not vacuous: a column the models lack shows up as a difference."""
    migrate(blank_engine)
    with blank_engine.begin() as connection:
        connection.execute(sa.text("ALTER TABLE cases ADD COLUMN stray INTEGER"))
    with blank_engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert [d[0] for d in diff] == ["remove_column"]


def test_session_scope_commits_or_rolls_back(engine: Engine) -> None:
    with session_scope(engine) as s:
        s.add(Repository(name="kept"))
    with pytest.raises(RuntimeError), session_scope(engine) as s:
        s.add(Repository(name="dropped"))
        s.flush()
        raise RuntimeError("boom")
    with session_scope(engine) as s:
        assert s.scalars(sa.select(Repository.name)).all() == ["kept"]


def test_foreign_keys_are_enforced(engine: Engine) -> None:
    from pipeline.results.store.models import Commit, utcnow

    with pytest.raises(sa.exc.IntegrityError), session_scope(engine) as s:
        s.add(Commit(repository_id=12345, sha="a" * 40, committed_at=utcnow()))


def test_datetimes_come_back_aware_utc(engine: Engine) -> None:
    from datetime import UTC, datetime, timedelta, timezone

    from pipeline.results.store.models import Commit

    paris = timezone(timedelta(hours=1))
    with session_scope(engine) as s:
        repo = Repository(name="r")
        s.add(repo)
        s.flush()
        s.add(Commit(repository_id=repo.id, sha="b" * 40, committed_at=datetime(2026, 1, 1, 13, 0, tzinfo=paris)))
    with session_scope(engine) as s:
        value = s.scalar(sa.select(Commit.committed_at))
    assert value == datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert value is not None and value.utcoffset() == timedelta(0)


def test_sqlite_engine_settings(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/a/b/store.db")
    try:
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() > 0
        assert (tmp_path / "a" / "b" / "store.db").exists()
    finally:
        engine.dispose()


def test_postgresql_urls_use_psycopg3() -> None:
    assert normalize_url("postgresql://u@h:5432/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgresql+psycopg://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("sqlite:///x.db").drivername == "sqlite"
    with pytest.raises(ValueError, match="unsupported database URL"):
        make_engine("mysql://u@h/db")


def test_packaged_files_cover_the_migrations() -> None:
    """Every file alembic needs at run time ships in the wheel: a module of a package (folder with
    __init__.py, found by setuptools) or matched by a package-data glob of pyproject.toml."""
    root = Path(__file__).resolve().parents[3]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["pipeline"]
    package_root = root / "pipeline"
    needed = [p for p in MIGRATIONS_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert any(p.name == "env.py" for p in needed) and any(p.parent.name == "versions" for p in needed)
    for path in needed:
        relative = path.relative_to(package_root).as_posix()
        in_package = path.suffix == ".py" and (path.parent / "__init__.py").exists()
        assert in_package or any(fnmatch(relative, g) for g in globs), f"{relative} would not be packaged"


_MIGRATE_AT_ONCE = """
import sys, time
from pathlib import Path
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
from pipeline.results.store.db import open_store
open_store(sys.argv[1]).dispose()
"""


def test_commands_started_at_once_on_a_new_sqlite_store_migrate_it_once(tmp_path: Path) -> None:
    """`benchfarm serve` and `benchfarm run` (or a test polling a store a command is creating) opening
    one new SQLite file at once: each one migrates it or finds it migrated, none fails on the other's
    half-made tables (SQLite runs DDL outside the migration's transaction)."""
    url, go = f"sqlite:///{tmp_path / 'store' / 'benchfarm.db'}", tmp_path / "go"
    root = Path(__file__).resolve().parents[3]
    procs = [subprocess.Popen([sys.executable, "-c", _MIGRATE_AT_ONCE, url, str(go)], cwd=root,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    time.sleep(3)   # every one imported and waiting
    go.touch()
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    engine = make_engine(url)
    try:
        with engine.connect() as c:
            assert c.exec_driver_sql("SELECT count(*) FROM alembic_version").scalar() == 1
    finally:
        engine.dispose()


def test_the_head_read_off_the_migration_files_is_alembics() -> None:
    from pipeline.results.store.db import head_revision

    assert head_revision() == ScriptDirectory.from_config(alembic_config()).get_current_head()


def test_a_store_at_head_opens_without_loading_alembic_and_one_behind_is_upgraded(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    migrate(make_engine(url))
    probe = ("import sys\nfrom pipeline.results.store.db import open_store\nopen_store(sys.argv[1])\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))")
    opened = subprocess.run([sys.executable, "-c", probe, url], capture_output=True, text=True, timeout=120)
    assert opened.returncode == 0 and opened.stdout.strip() == "[]", opened.stdout + opened.stderr

    from pipeline.results.store.db import downgrade, head_revision

    downgrade(make_engine(url), "-1")
    upgraded = subprocess.run([sys.executable, "-c", probe, url], capture_output=True, text=True, timeout=120)
    assert upgraded.returncode == 0 and "alembic" in upgraded.stdout, upgraded.stdout + upgraded.stderr
    with make_engine(url).connect() as connection:
        assert connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalar() == head_revision()
