"""The `engine` fixture: a freshly migrated store on SQLite (a file) and on PostgreSQL (a fresh
database on 127.0.0.1:5432, dropped afterwards). Without PostgreSQL the tests FAIL, unless
BENCHFARM_TEST_NO_POSTGRES=1 says to skip that backend."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy import Connection, Engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from pipeline.agents.devices import LocalDevice
from pipeline.contracts import BundleManifest, ResultDocument
from pipeline.store.db import make_engine, open_store, session_scope
from tests.helpers import factories as f

POSTGRES_ADMIN_URL = os.environ.get("BENCHFARM_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test")


@contextmanager
def fresh_database(store: str, folder: Path) -> Iterator[str]:
    """The URL of an empty database of `store` (sqlite: a file under `folder`; postgresql: a new
    database on the server, dropped afterwards)."""
    if store == "sqlite":
        yield f"sqlite:///{folder}/nested/benchfarm.db"
        return
    if os.environ.get("BENCHFARM_TEST_NO_POSTGRES") == "1":
        pytest.skip("BENCHFARM_TEST_NO_POSTGRES=1")
    try:
        admin = psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL} ({exc}); start it, point "
                    "BENCHFARM_TEST_POSTGRES_URL at one, or set BENCHFARM_TEST_NO_POSTGRES=1 to skip it", pytrace=False)
    name = f"benchfarm_test_{uuid.uuid4().hex[:16]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of an empty database (nothing created in it yet)."""
    with fresh_database(request.param, tmp_path_factory.mktemp("store")) as url:
        yield url


@pytest.fixture
def blank_engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = open_store(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def seeded(engine: Engine) -> Engine:
    """`seed`'s store."""
    return seed(engine)


def seed(engine: Engine) -> Engine:
    """A store knowing the repository, a first-parent chain c0 <- c1 <- c2 <- c3, the device
    classes cpu-x86-64 and other-cpu, and a manifest at c0 registering GEMM and CONV."""
    from pipeline.store import ingest

    with session_scope(engine) as s:
        ingest.upsert_repository(s, name=f.REPO, url="https://example.com/bench/kernels")
        ingest.record_commits(s, repository=f.REPO, commits=[
            f.commit(0, minutes=0), f.commit(1, 0, minutes=1), f.commit(2, 1, minutes=2), f.commit(3, 2, minutes=3)])
        ingest.upsert_device_class(s, f.device_class())
        ingest.upsert_device_class(s, f.device_class("other-cpu"))
        ingest.ingest_manifest(s, manifest=f.manifest(f.sha(0), [f.built_entry(f.GEMM, model="resnet"),
                                                                  f.built_entry(f.CONV)]), path="/bundles/0")
    return engine


@pytest.fixture
def session(seeded: Engine) -> Iterator[Session]:
    with session_scope(seeded) as s:
        yield s


def insert_early_rows(c: Connection) -> None:
    """Rows every revision since 0001 stores in the same shape, by raw SQL (the migration tests seed a
    store at an old revision, which today's models do not fit): repository 1, commits 1 and 2 (shas
    1 and 0), device class 1, cases 1 and 2 with their latency series 1 and 2, run 'run' at commit 1."""
    c.execute(sa.text("INSERT INTO repositories (id, name, default_branch) VALUES (1, 'r', 'main')"))
    c.execute(sa.text("INSERT INTO commits (id, repository_id, sha, message, author, committed_at) "
                      "VALUES (1, 1, :a, '', '', :t), (2, 1, :b, '', '', :t)"),
              {"a": f.sha(1), "b": f.sha(0), "t": f.T0})
    c.execute(sa.text("INSERT INTO device_classes (id, name, kind, targets, runtime, description) "
                      "VALUES (1, 'dc', 'cpu', '[]', 'iree', '')"))
    c.execute(sa.text("INSERT INTO cases (id, case_id, family, name, shape, dtype, impl, model) VALUES "
                      "(1, 'g/a/1/f32/x', 'g', 'a', '1', 'f32', 'x', ''), (2, 'g/b/1/f32/x', 'g', 'b', '1', 'f32', 'x', '')"))
    c.execute(sa.text("INSERT INTO series (id, case_id, device_class_id, metric) VALUES (1, 1, 1, 'latency'), "
                      "(2, 2, 1, 'latency')"))
    c.execute(sa.text("INSERT INTO runs (id, repository_id, commit_id, kind, status, created_at) "
                      "VALUES ('run', 1, 1, 'adhoc', 'done', :t)"), {"t": f.T0})


def store_local_run(engine: Engine, suite: Path, document: ResultDocument, device: LocalDevice,
                    manifest: BundleManifest, bundle_dir: Path) -> None:
    """A job's results stored as `benchfarm run` stores them: the suite's commits (`suite`: its
    folder in a git checkout), the device, a local run of the manifest's commit, its manifest, then
    the document under that run's job."""
    from pipeline.build.suite_loader import commit_history, locate_suite
    from pipeline.store import ingest

    location = locate_suite(suite)
    with session_scope(engine) as session:
        repository = ingest.upsert_repository(session, name=manifest.repository)
        ingest.record_commits(session, repository=repository, commits=commit_history(location, manifest.commit))
        ingest.upsert_device_class(session, device.device_class)
        ingest.upsert_device(session, info=device.info)
        run = ingest.create_run(session, repository=repository, commit_sha=manifest.commit, kind="local",
                                device_classes=[device.device_class.name])
        ingest.ingest_manifest(session, manifest=manifest, path=str(bundle_dir), bundle_dir=Path(bundle_dir))
        document = document.model_copy(update={"run_id": run.id, "job_id": run.jobs[0].id})
    with session_scope(engine) as session:
        ingest.ingest_result(session, document=document)
