"""Code-path evidence in the store (issue 32): what each bundle entry's disassembly said, its listing,
and the code digest of what a result timed.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27

- `compile_stats.code_tool`, `code_digest`, `code_unavailable`, `instructions`: the manifest entry's
  `code` (the tool, the listing's digest, or why no disassembler read it; the instruction mix), so
  that a comparison shows what changed in the code without the bundle.
- `code_listings`: each normalized listing once per digest (zlib), with its opcode counts: what the
  PR comment and the compare page diff.
- `case_results.code_digest`, `paired_code_digest`: `BundleEntry.code_digest` of what was timed and
  of its paired base: a drift sentinel timed although its code is the base's (a rename) is unchanged,
  whatever its timing says.
Existing rows keep every value; the new columns are empty for them (nothing said, as before).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # ADD COLUMN in place, also on SQLite: a batch copy of these tables would drop and re-create them
    op.add_column("compile_stats", sa.Column("code_tool", sa.String(length=200), nullable=True))
    op.add_column("compile_stats", sa.Column("code_digest", sa.String(length=64), nullable=True))
    op.add_column("compile_stats", sa.Column("code_unavailable", sa.Text(), nullable=True))
    op.add_column("compile_stats", sa.Column("instructions", sa.JSON(), nullable=True))
    op.add_column("case_results", sa.Column("code_digest", sa.String(length=64), nullable=True))
    op.add_column("case_results", sa.Column("paired_code_digest", sa.String(length=64), nullable=True))
    op.create_table(
        "code_listings",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("opcodes", sa.JSON(), nullable=False),
        sa.Column("listing", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_code_listings")),
    )


def downgrade() -> None:
    op.drop_table("code_listings")
    for column in ("paired_code_digest", "code_digest"):
        op.drop_column("case_results", column)
    for column in ("instructions", "code_unavailable", "code_digest", "code_tool"):
        op.drop_column("compile_stats", column)
