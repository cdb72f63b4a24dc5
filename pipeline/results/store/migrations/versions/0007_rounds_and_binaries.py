"""Timing rounds and binary identities of case results.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23

- `measurements.round_sizes`: samples per timing round (the round is the unit of replication of
  the verdict's statistics); None for results that did not say (imports, older agents);
- `case_results.binary_digest` / `paired_binary_digest`: what was timed, for the head and for the
  paired base (`BundleEntry.binary_digest`); equal digests on one device class are identical code;
- `series.noise_paired` / `noise_unpaired`: the case's measured noise on its device class (relative,
  one standard deviation of a paired change between identical binaries, and of a run-to-run change
  of the median), learned from history; a verdict's threshold is the larger of the floor and k
  times this.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("series") as batch:
        batch.add_column(sa.Column("noise_paired", sa.Double(), nullable=True))
        batch.add_column(sa.Column("noise_unpaired", sa.Double(), nullable=True))
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("round_sizes", sa.JSON(), nullable=True))
    with op.batch_alter_table("case_results") as batch:
        batch.add_column(sa.Column("binary_digest", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("paired_binary_digest", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("case_results") as batch:
        batch.drop_column("paired_binary_digest")
        batch.drop_column("binary_digest")
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("round_sizes")
    with op.batch_alter_table("series") as batch:
        batch.drop_column("noise_unpaired")
        batch.drop_column("noise_paired")
