"""What a result was measured with: `case_results.environment` and `jobs.environment`.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26

The result document's per-case environment (input seed, buffer copies, timing group, how a pair was
timed, throttled samples discarded, the torch version and SDPA backend of a vendor control) and the
job's (host, runtime versions, checks run and reused, placement budget) were dropped at ingest; a
reading could not be traced to how it was taken.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("case_results") as batch:
        batch.add_column(sa.Column("environment", sa.JSON, nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("environment", sa.JSON, nullable=True))


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN, also on SQLite (3.35+): no copy of the table, as batch mode would make
    op.drop_column("jobs", "environment")
    op.drop_column("case_results", "environment")
