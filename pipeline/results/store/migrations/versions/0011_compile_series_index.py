"""Compile series: an index on `compile_stats` (case_id, target).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24

A compile series is (case, target) across every bundle (`pipeline.results.store.compile_stats`); its
history reads those rows alone, which without the index is a scan of every bundle's statistics.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(op.f("ix_compile_stats_case_id_target"), "compile_stats", ["case_id", "target"])


def downgrade() -> None:
    op.drop_index(op.f("ix_compile_stats_case_id_target"), table_name="compile_stats")
