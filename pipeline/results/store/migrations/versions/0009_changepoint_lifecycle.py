"""Change-point lifecycle: suspected -> confirmed -> retracted, recorded, not deleted.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23

- `change_points.lifecycle`: the analysis' view of the point (`models.LIFECYCLE`); rows stored
  before this revision were reported by the detector and become "confirmed";
- `change_points.confirmed_at` / `retracted_at`: when the analysis confirmed or retracted it
  (existing rows: confirmed at detection);
- `change_points.reason`: why it was retracted.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("change_points") as batch:
        batch.add_column(sa.Column("lifecycle", sa.String(length=16), server_default="confirmed", nullable=False))
        batch.add_column(sa.Column("confirmed_at", UTC_DATETIME, nullable=True))
        batch.add_column(sa.Column("retracted_at", UTC_DATETIME, nullable=True))
        batch.add_column(sa.Column("reason", sa.Text(), server_default="", nullable=False))
        batch.create_check_constraint(op.f("ck_change_points_lifecycle"),
                                      "lifecycle IN ('suspected', 'confirmed', 'retracted')")
    op.execute("UPDATE change_points SET confirmed_at = detected_at")


def downgrade() -> None:
    with op.batch_alter_table("change_points") as batch:
        batch.drop_constraint(op.f("ck_change_points_lifecycle"), type_="check")
        batch.drop_column("reason")
        batch.drop_column("retracted_at")
        batch.drop_column("confirmed_at")
        batch.drop_column("lifecycle")
