"""The store fixtures (tests/helpers/stores.py) for the tests of pipeline/orchestration/dispatch."""

from tests.helpers.stores import blank_engine, database_url, engine, seeded, session, store_url  # noqa: F401  (the store fixtures: SQLite and PostgreSQL)
