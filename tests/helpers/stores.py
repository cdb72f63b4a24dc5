"""The `engine` fixture: a freshly migrated store on SQLite (a file) and on PostgreSQL (a fresh
database on 127.0.0.1:5432, dropped afterwards). Without PostgreSQL the tests FAIL, unless
BENCHFARM_TEST_NO_POSTGRES=1 says to skip that backend.

Migrating a store takes 0.3-3 s (two dozen Alembic revisions), and most tests want one: each test
process migrates one template per backend, once, and every test gets a copy of it (`migrated_database`:
the SQLite file copied, or `CREATE DATABASE ... TEMPLATE` on PostgreSQL), the same schema and rows
a fresh migration leaves. The migration tests themselves start from `blank_engine`, an empty database.
Fixtures that fill the same store for many tests (the web tests' demo store, the stepped history) fill it
once per process on a copy of the template and copy that per test the same way (`built_engine`)."""

from __future__ import annotations

import atexit
import contextlib
import copy
import os
import queue
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy import Connection, Engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from pipeline.agents.devices import LocalDevice
from pipeline.config import AnalysisSettings
from pipeline.contracts import BundleManifest, ResultDocument
from pipeline.results.store.db import make_engine, migrate, open_store, session_scope
from tests.helpers import factories as f

T = TypeVar("T")
POSTGRES_ADMIN_URL = os.environ.get("BENCHFARM_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test")


def _admin() -> psycopg.Connection:
    """A connection to the PostgreSQL server's admin database (skips or fails the test without one)."""
    if os.environ.get("BENCHFARM_TEST_NO_POSTGRES") == "1":
        pytest.skip("BENCHFARM_TEST_NO_POSTGRES=1")
    try:
        return psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL} ({exc}); start it, point "
                    "BENCHFARM_TEST_POSTGRES_URL at one, or set BENCHFARM_TEST_NO_POSTGRES=1 to skip it", pytrace=False)


def _postgres_url(name: str) -> str:
    return make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


class _Dropper:
    """Drops the tests' databases in a thread of its own: PostgreSQL 15 checkpoints on every DROP
    DATABASE (0.5-2 s on the 2-core CI machine), waited for by no test. At most a few wait their turn
    (the disk they hold stays bounded); the process waits for the last at exit."""

    def __init__(self) -> None:
        self._queue: queue.Queue[str | None] = queue.Queue(maxsize=4)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def drop(self, name: str) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="drop-test-databases", daemon=True)
                self._thread.start()
                atexit.register(self._finish)
        self._queue.put(name)

    def _work(self) -> None:
        while (name := self._queue.get()) is not None:
            try:
                with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except psycopg.Error as exc:   # left behind, and said so: the next run's databases have new names
                print(f"tests: could not drop the database {name}: {exc}", file=sys.stderr)

    def _finish(self) -> None:
        assert self._thread is not None
        self._queue.put(None)
        self._thread.join(timeout=300)


_DROPPER = _Dropper()


@contextmanager
def _postgres_database(template: str | None) -> Iterator[str]:
    """A new database on the server (a copy of `template`, or empty), dropped afterwards."""
    name = f"benchfarm_test_{uuid.uuid4().hex[:16]}"
    with _admin() as admin:
        admin.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    try:
        yield _postgres_url(name)
    finally:
        _DROPPER.drop(name)


@contextmanager
def fresh_database(store: str, folder: Path) -> Iterator[str]:
    """The URL of an empty database of `store` (sqlite: a file under `folder`; postgresql: a new
    database on the server, dropped afterwards)."""
    if store == "sqlite":
        yield f"sqlite:///{folder}/nested/benchfarm.db"
        return
    with _postgres_database(None) as url:
        yield url


class _Templates:
    """This process's migrated templates, made on first use: a SQLite file in a temporary folder and
    a PostgreSQL database, both removed when the process exits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sqlite: Path | None = None
        self._postgres: str | None = None

    def sqlite(self) -> Path:
        with self._lock:
            if self._sqlite is None:
                folder = Path(tempfile.mkdtemp(prefix="benchfarm-template-"))
                atexit.register(shutil.rmtree, folder, True)
                path = folder / "benchfarm.db"
                engine = open_store(f"sqlite:///{path}")
                with engine.connect() as connection:   # the WAL folded into the file: the file is the store
                    connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                engine.dispose()
                self._sqlite = path
            return self._sqlite

    def postgres(self) -> str:
        with self._lock:
            if self._postgres is None:
                name = f"benchfarm_template_{uuid.uuid4().hex[:16]}"
                with _admin() as admin:
                    admin.execute(f'CREATE DATABASE "{name}"')
                atexit.register(_drop_template, name)
                engine = make_engine(_postgres_url(name))
                migrate(engine)
                engine.dispose()   # a template database must have no connections when it is copied
                self._postgres = name
            return self._postgres


def _drop_template(name: str) -> None:
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_TEMPLATES = _Templates()


def migrated_sqlite(path: Path) -> str:
    """The URL of a new migrated SQLite store at `path` (a copy of the template; the folder is made)."""
    assert not path.exists(), f"{path} exists: the template is copied only where no store is"
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_TEMPLATES.sqlite(), path)
    return f"sqlite:///{path}"


@contextmanager
def migrated_database(store: str, folder: Path) -> Iterator[str]:
    """The URL of a migrated database of `store`, as `fresh_database` + `migrate` would leave it."""
    if store == "sqlite":
        yield migrated_sqlite(folder / "nested" / "benchfarm.db")
        return
    with _postgres_database(_TEMPLATES.postgres()) as url:
        yield url


def open_migrated(url: str) -> Engine:
    """`open_store(url)` of a SQLite URL, faster: where no store is yet, the template's copy."""
    parsed = make_url(url)
    assert parsed.get_backend_name() == "sqlite" and parsed.database, url
    if Path(parsed.database).exists():
        return open_store(url)
    return make_engine(migrated_sqlite(Path(parsed.database)))


class _Built:
    """Stores that a function fills once per process (a demo store, a long history), on top of the
    migrated template, then copied per test as the template is; removed when the process exits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._built: dict[tuple[str, str], tuple[str, Any]] = {}

    def template(self, store: str, key: str, build: Callable[[Engine], T]) -> tuple[str, T]:
        """(SQLite file or PostgreSQL database name, what `build` returned) of `key`'s store."""
        with self._lock:
            if (store, key) not in self._built:
                if store == "sqlite":
                    folder = Path(tempfile.mkdtemp(prefix="benchfarm-built-"))
                    atexit.register(shutil.rmtree, folder, True)
                    template, url = str(folder / "benchfarm.db"), migrated_sqlite(folder / "benchfarm.db")
                else:
                    template = f"benchfarm_built_{uuid.uuid4().hex[:16]}"
                    with _admin() as admin:
                        admin.execute(f'CREATE DATABASE "{template}" TEMPLATE "{_TEMPLATES.postgres()}"')
                    atexit.register(_drop_template, template)
                    url = _postgres_url(template)
                engine = make_engine(url)
                try:
                    value = build(engine)
                    if store == "sqlite":
                        with engine.connect() as connection:   # the WAL folded into the file, as for the template
                            connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                finally:
                    engine.dispose()   # a template database must have no connections when it is copied
                self._built[(store, key)] = (template, value)
            return self._built[(store, key)]


_BUILT = _Built()


@contextmanager
def built_engine(store: str, folder: Path, key: str, build: Callable[[Engine], T]) -> Iterator[tuple[Engine, T]]:
    """(engine, what `build` returned) of a copy of the store `build` filled, once per process and `key`,
    on a migrated one: for fixtures that fill the same store for many tests. The returned value is a
    deep copy per test. Process-wide caches keyed by a store's URL (the analysis' tails) see a copy
    as a store no process analysed yet."""
    template, value = _BUILT.template(store, key, build)
    with contextlib.ExitStack() as stack:
        if store == "sqlite":
            path = folder / "nested" / "benchfarm.db"
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(template, path)
            url = f"sqlite:///{path}"
        else:
            url = stack.enter_context(_postgres_database(template))
        engine = make_engine(url)
        stack.callback(engine.dispose)
        yield engine, copy.deepcopy(value)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of an empty database (nothing created in it yet)."""
    with fresh_database(request.param, tmp_path_factory.mktemp("store")) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a migrated database (the template's copy)."""
    with migrated_database(request.param, tmp_path_factory.mktemp("store")) as url:
        yield url


@pytest.fixture
def blank_engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    engine = make_engine(store_url)
    yield engine
    engine.dispose()


@pytest.fixture
def seeded(engine: Engine) -> Engine:
    """`seed`'s store."""
    return seed(engine)


def seed(engine: Engine) -> Engine:
    """A store knowing the repository, a first-parent chain c0 <- c1 <- c2 <- c3, the device
    classes cpu-x86-64 and other-cpu, and a manifest at c0 registering GEMM and CONV."""
    from pipeline.results.store import ingest

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
    from pipeline.results.store import ingest

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
        ingest.ingest_result(session, document=document, analysis=AnalysisSettings())
