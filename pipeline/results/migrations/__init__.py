"""Alembic migrations of the results store (run through `pipeline.results.db.migrate`)."""
