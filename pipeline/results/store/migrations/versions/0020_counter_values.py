"""Hardware counters: `counter_values`, one counter of one case result (or of its paired base).

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27

Agents with a profiler report each checked binary's counters of one launch (instructions, DRAM bytes,
L2 hit rate, occupancy: `pipeline.contracts.counters`). They are deterministic, a series of single
values per case, device class and counter, not samples: a table of their own beside `measurements`.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "counter_values",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("case_result_id", BIG_ID, nullable=False),
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("commit_id", sa.Integer(), nullable=False),
        sa.Column("base", sa.Boolean(), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.Column("profiler", sa.String(length=200), nullable=False),
        sa.ForeignKeyConstraint(["case_result_id"], ["case_results.id"],
                                name=op.f("fk_counter_values_case_result_id_case_results"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["commit_id"], ["commits.id"], name=op.f("fk_counter_values_commit_id_commits")),
        sa.ForeignKeyConstraint(["series_id"], ["series.id"], name=op.f("fk_counter_values_series_id_series")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_counter_values")),
        sa.UniqueConstraint("case_result_id", "series_id", "base",
                            name=op.f("uq_counter_values_case_result_id_series_id_base")),
    )
    op.create_index(op.f("ix_counter_values_series_id_commit_id"), "counter_values", ["series_id", "commit_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_counter_values_series_id_commit_id"), table_name="counter_values")
    op.drop_table("counter_values")
