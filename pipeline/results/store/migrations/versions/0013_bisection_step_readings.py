"""Bisection steps: a commit may be run twice (`reading`), to confirm a change found at several places.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24

`bisect_search.plan` confirms a finding at several commits with a second job of the commits at the
ends of each move; those jobs are steps of their own, so (bisection, position) is no longer
unique: (bisection, position, reading) is. Existing steps are their commit's first reading.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("bisection_steps") as batch:
        batch.add_column(sa.Column("reading", sa.Integer(), server_default="1", nullable=False))
        batch.drop_constraint("uq_bisection_steps_bisection_id_position", type_="unique")
        batch.create_unique_constraint(op.f("uq_bisection_steps_bisection_id_position_reading"),
                                       ["bisection_id", "position", "reading"])


def downgrade() -> None:
    op.execute("DELETE FROM bisection_steps WHERE reading > 1")
    with op.batch_alter_table("bisection_steps") as batch:
        batch.drop_constraint("uq_bisection_steps_bisection_id_position_reading", type_="unique")
        batch.create_unique_constraint(op.f("uq_bisection_steps_bisection_id_position"), ["bisection_id", "position"])
        batch.drop_column("reading")
