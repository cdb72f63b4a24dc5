"""Jobs' progress: `jobs.progress`, what a running job is doing, from its agent's heartbeat.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26

A job showed "running" for the minutes of a GPU suite's timing, or while its CPU timing waited for a
compile on its host, with nothing to say which; the agent's heartbeat now carries its stage.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("progress", sa.String(300), nullable=True))


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN, also on SQLite (3.35+): no copy of the table, as batch mode would make
    op.drop_column("jobs", "progress")
