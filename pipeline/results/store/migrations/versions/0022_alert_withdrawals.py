"""Withdrawn alerts: `change_points.alert_withdrawn_at` and `email_withdrawn_at`, when the follow-up
that withdraws an announced regression was posted (webhook) and mailed.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-27

An announced regression that the analysis no longer confirms (retracted, or back to suspected) is
withdrawn on each channel that announced it (`pipeline.service.alerts`). Points announced and no
longer confirmed before this revision count as withdrawn (the time of their announcement), as 0010
counted the confirmed ones as announced: enabling this on an existing store withdraws what stops
being confirmed from then on, not its whole history. No row is rewritten otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("change_points") as batch:
        batch.add_column(sa.Column("alert_withdrawn_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("email_withdrawn_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE change_points SET alert_withdrawn_at = alerted_at "
               "WHERE lifecycle <> 'confirmed' AND alerted_at IS NOT NULL")
    op.execute("UPDATE change_points SET email_withdrawn_at = emailed_at "
               "WHERE lifecycle <> 'confirmed' AND emailed_at IS NOT NULL")


def downgrade() -> None:
    with op.batch_alter_table("change_points") as batch:
        batch.drop_column("email_withdrawn_at")
        batch.drop_column("alert_withdrawn_at")
