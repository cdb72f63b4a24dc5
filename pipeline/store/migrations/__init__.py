"""Alembic migrations of the results store (run through `pipeline.store.db.migrate`)."""
