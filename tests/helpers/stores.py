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
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

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
