"""Alembic migrations of the results store (run through `pipeline.results.store.db.migrate`)."""
