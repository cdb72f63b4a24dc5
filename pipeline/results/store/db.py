"""The one database helper: engine, migrations, session scope.

SQLite (the embedded one-machine mode) and PostgreSQL (a farm) are both first-class:
- SQLite: the parent folder is created, foreign keys are enforced, WAL journal (readers do not
  block the writer), and a busy timeout so concurrent writers wait instead of failing at once;
- PostgreSQL through psycopg 3: `postgresql://` URLs are mapped to `postgresql+psycopg://`.

The store has one door (the import-linter contract in pyproject.toml): outside `pipeline.results.store`, an
`Engine` and the `Session` that `session_scope` yields are handles passed to the store's query and
command functions, typed with the names this module exports; nothing outside runs SQL on them.
"""

from __future__ import annotations

import fcntl
import functools
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import CursorResult, Engine, Result, Table, create_engine, event, inspect, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session

if TYPE_CHECKING:   # Alembic is imported where a migration runs (`_alembic`), not by every command
    from alembic.config import Config

__all__ = ["UNAVAILABLE", "Engine", "MigrationError", "Session", "StoreError", "database", "make_engine", "migrate",
           "open_store", "session_scope", "shown_url"]

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 30_000
# Any fixed number: serialises concurrent `migrate` calls on one PostgreSQL database.
_MIGRATION_LOCK_KEY = 0x62656E6368  # "bench"


def normalize_url(url: str | URL) -> URL:
    """The URL the engine is made with: psycopg 3 for PostgreSQL."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def shown_url(url: str | URL) -> str:
    """The database URL as logs and terminals may show it: the password masked."""
    return make_url(url).render_as_string(hide_password=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")  # safe with WAL; a crash loses at most the last commit
    finally:
        cursor.close()


def make_engine(url: str | URL, **kwargs: Any) -> Engine:
    """An engine for a sqlite:// or postgresql:// URL, set up as the module docstring says."""
    parsed = normalize_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        database = parsed.database
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if backend == "postgresql":
        kwargs.setdefault("pool_pre_ping", True)
        return create_engine(parsed, **kwargs)
    raise ValueError(f"unsupported database URL {shown_url(parsed)}: use sqlite:// or postgresql://")


def alembic_config(engine: Engine | None = None) -> Config:
    """An Alembic configuration pointing at the packaged migrations; no alembic.ini needed."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if engine is not None:
        config.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    return config


class MigrationError(RuntimeError):
    """A migration left rows that reference nothing; it was rolled back where the backend can."""


@contextmanager
def migration_connection(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction for migrations: on PostgreSQL holding the advisory lock that
    serialises concurrent `migrate` calls; on SQLite with foreign keys off, because SQLite alters a
    table by copying it and dropping the old one, and with them on that drop deletes every row that
    references the table (ON DELETE CASCADE). They are checked before the commit and on again after."""
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")  # a no-op inside a transaction
            connection.commit()
        try:
            with connection.begin():
                if connection.dialect.name == "postgresql":
                    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
                before = _stored_revision(connection) if sqlite else None
                yield connection
                # the check reads every referencing row: only after a migration ran, not at every start
                if sqlite and _stored_revision(connection) != before:
                    dangling = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                    if dangling:
                        tables = sorted({str(row[0]) for row in dangling})
                        raise MigrationError(f"the migration left {len(dangling)} rows referencing nothing "
                                             f"in {', '.join(tables)}")
        finally:
            if sqlite:
                connection.exec_driver_sql("PRAGMA foreign_keys=ON")
                connection.commit()
                if connection.exec_driver_sql("PRAGMA foreign_keys").scalar() != 1:
                    connection.invalidate()  # never back into the pool without its foreign keys


def _stored_revision(connection: Connection) -> str | None:
    """The revision the store is at (comma-joined where it holds several heads; None: never migrated)."""
    if not inspect(connection).has_table("alembic_version"):
        return None
    return ",".join(connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalars()) or None


_REVISION = re.compile(r'^(revision|down_revision)\b[^=\n]*=\s*(?:None|"([^"]*)")', re.MULTILINE)


@functools.cache
def head_revision() -> str | None:
    """The newest migration's revision, read off the migration files' `revision` and `down_revision`
    lines (what Alembic's script directory works out, without Alembic: loading it and the scripts
    cost a command ~0.3 s on a store already at head). None where the files name no single head."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in (MIGRATIONS_DIR / "versions").glob("*.py"):
        for name, value in _REVISION.findall(script.read_text()):
            if value:
                (revisions if name == "revision" else parents).add(value)
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def _at_head(engine: Engine) -> bool:
    head = head_revision()
    if head is None:
        return False
    with engine.connect() as connection:
        return _stored_revision(connection) == head


def migrate(engine: Engine, revision: str = "head") -> None:
    """Upgrade the database to `revision` (the newest by default); safe to call on every start, and
    cheap where the store is at the newest revision already (Alembic is not loaded then)."""
    if revision == "head" and _at_head(engine):
        return
    from alembic import command

    _alembic(engine, command.upgrade, revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Downgrade the database to `revision` (rolling a release back)."""
    from alembic import command

    _alembic(engine, command.downgrade, revision)


def _alembic(engine: Engine, step: Callable[[Config, str], None], revision: str) -> None:
    config = alembic_config(engine)
    with _sqlite_file_lock(engine), migration_connection(engine) as connection:
        config.attributes["connection"] = connection
        step(config, revision)


@contextmanager
def _sqlite_file_lock(engine: Engine) -> Iterator[None]:
    """Serialise the migrations of one SQLite file across processes (`benchfarm serve` and `benchfarm
    run` started at once on a new store): SQLite runs the migrations' DDL outside their transaction,
    so a second migrator would find the first one's tables half made. The lock is a file beside the
    store's (`<store>-migration.lock`), held while migrating; PostgreSQL has its advisory lock."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:" or database.startswith("file:"):
        yield
        return
    with open(f"{Path(database).expanduser()}-migration.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes
        yield


def open_store(url: str | URL) -> Engine:
    """make_engine + migrate: what the service and the CLI call once at start."""
    engine = make_engine(url)
    migrate(engine)
    return engine


def dialect_insert(session: Session, table: Table) -> postgresql.Insert | sqlite.Insert:
    """INSERT into `table` in the session's dialect: PostgreSQL's and SQLite's both take ON CONFLICT."""
    if session.get_bind().dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


StoreError = DBAPIError
"""What the store raises when the database refuses or fails a statement (the driver's error in `.orig`)."""
UNAVAILABLE: tuple[type[StoreError], ...] = (OperationalError, InterfaceError)
"""The errors of a store that did not answer (PostgreSQL restarting, a connection cut: psycopg's "the
connection is closed" is an InterfaceError; SQLite locked) or gave up (a deadlock): worth a retry."""


def rowcount(result: Result[Any]) -> int:
    """Rows an UPDATE matched (a compare-and-set's outcome)."""
    return int(cast("CursorResult[Any]", result).rowcount)


def database(session: Session) -> str:
    """The backend behind the session ("sqlite", "postgresql"), after a round trip to it (health checks)."""
    session.execute(text("SELECT 1"))
    return session.get_bind().dialect.name


def session_url(session: Session) -> str:
    """The URL of the database behind the session, password included: a key, never shown (`shown_url`)."""
    return str(session.get_bind().engine.url)


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """One transaction: commit when the block succeeds, roll back on any exception, always close."""
    session = Session(engine, expire_on_commit=False)
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
