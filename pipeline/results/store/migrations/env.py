"""Alembic environment: run by `pipeline.results.store.db.migrate` with a connection in
`config.attributes["connection"]`, or by the `alembic` command with `sqlalchemy.url` set
(e.g. `alembic -x url=sqlite:///x.db upgrade head`, or BENCHFARM_DATABASE_URL)."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy.engine import Connection

from pipeline.results.store.db import make_engine, migration_connection
from pipeline.results.store.models import Base

config = context.config
target_metadata = Base.metadata


def _configure_and_run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
    )
    with context.begin_transaction():
        context.run_migrations()


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    url = url or os.environ.get("BENCHFARM_DATABASE_URL")
    if not url:
        raise RuntimeError("no database URL: pass -x url=..., set sqlalchemy.url or BENCHFARM_DATABASE_URL")
    return url


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure_and_run(connection)
        return
    engine = make_engine(_url())
    try:
        with migration_connection(engine) as connection:
            _configure_and_run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
