"""E-mail alerts: `change_points.emailed_at`, when a confirmed regression was e-mailed.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-24

Apart from `alerted_at` (the webhook) so that each channel sends once: a webhook post that fails
is retried without e-mailing again, and the other way round. Points confirmed before this revision
count as e-mailed (emailed_at = confirmed_at), as 0010 did for the webhook.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("change_points") as batch:
        batch.add_column(sa.Column("emailed_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE change_points SET emailed_at = confirmed_at WHERE lifecycle = 'confirmed'")


def downgrade() -> None:
    with op.batch_alter_table("change_points") as batch:
        batch.drop_column("emailed_at")
