"""Series tails: the newest commits of each series' default-branch history, kept by the analysis
so that an upload is analysed from what it adds, not from the whole history (`store.analysis`,
"Incremental").

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-27

A cache: an existing store starts without tails and each series gets its own at its next
analysis (read from its measurements once). No stored row is changed.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "series_tails",
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("repository_id", sa.Integer(), nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.Column("first_position", sa.Integer(), nullable=False),
        sa.Column("commit_ids", sa.LargeBinary(), nullable=False),
        sa.Column("levels", sa.LargeBinary(), nullable=False),
        sa.Column("digests", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["series_id"], ["series.id"], name=op.f("fk_series_tails_series_id_series"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["repository_id"], ["repositories.id"],
                                name=op.f("fk_series_tails_repository_id_repositories"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("series_id", "repository_id", name=op.f("pk_series_tails")),
    )


def downgrade() -> None:
    op.drop_table("series_tails")
