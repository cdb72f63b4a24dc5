"""Local jobs' owner: `jobs.owner`, the process running a job of `benchfarm run` (which holds no lease).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27

A `benchfarm run` killed outright (SIGKILL, a closed terminal, a reboot) left its job `running`
forever: nothing renews or expires a local job. With its owner recorded, the next `run`, `up` or
`serve` on the host fails the jobs whose owner is gone.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("owner", sa.String(300), nullable=True))


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN, also on SQLite (3.35+): no copy of the table, as batch mode would make
    op.drop_column("jobs", "owner")
