"""Builds' heartbeats: `build_requests.heartbeat_at`, renewed by the builder while it builds.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26

A builder that dies outright (SIGKILL, the OOM killer, a reboot) left its request `building` for
good, and the run's jobs waiting for a bundle that nobody would build; the reaper now queues a build
again whose heartbeat is older than the dispatch lease. Builds under way at the upgrade have none:
they count from `started_at`.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("build_requests") as batch:
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN, also on SQLite (3.35+): no copy of the table, as batch mode would make
    op.drop_column("build_requests", "heartbeat_at")
