"""Web UI: password users (for sign-in) and each compiled case's FLOPs and bytes (for the roofline).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25

- `users`: name, scrypt hash of the password (never the password), scopes, created / last
  sign-in / disabled;
- `compile_stats.flops`, `compile_stats.bytes`: the manifest entry's FLOPs and minimum bytes per
  call (NULL for bundles stored before this revision).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("password_hash", sa.String(length=300), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("last_login_at", UTC_DATETIME, nullable=True),
        sa.Column("disabled_at", UTC_DATETIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("name", name=op.f("uq_users_name")),
    )
    with op.batch_alter_table("compile_stats") as batch:
        batch.add_column(sa.Column("flops", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("compile_stats") as batch:
        batch.drop_column("bytes")
        batch.drop_column("flops")
    op.drop_table("users")
