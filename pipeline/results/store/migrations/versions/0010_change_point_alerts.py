"""Alerts: `change_points.alerted_at`, when a confirmed regression was announced.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24

Points confirmed before this revision count as announced (alerted_at = confirmed_at): enabling
alerts on an existing store announces what is confirmed from then on, not its whole history.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("change_points") as batch:
        batch.add_column(sa.Column("alerted_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE change_points SET alerted_at = confirmed_at WHERE lifecycle = 'confirmed'")


def downgrade() -> None:
    with op.batch_alter_table("change_points") as batch:
        batch.drop_column("alerted_at")
