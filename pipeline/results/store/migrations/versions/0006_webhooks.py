"""GitHub webhooks and the reports owed to pull requests and pushes.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24

- `webhook_deliveries`: every delivery by its X-GitHub-Delivery id (a redelivery is not processed
  twice), with its payload until the webhook worker processed it, and what came of it;
- `run_reports`: a report owed when a run ends (pull request or pushed commit, base, merge base),
  and whether it was posted, kept in the outbox, or failed;
- `build_requests.base_sha`: paired runs build (or reuse) the base commit's bundle too.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(length=100), nullable=False),
        sa.Column("event", sa.String(length=50), nullable=False),
        sa.Column("action", sa.String(length=50), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("received_at", UTC_DATETIME, nullable=False),
        sa.Column("processed_at", UTC_DATETIME, nullable=True),
        sa.CheckConstraint("state IN ('pending', 'done', 'ignored', 'failed')", name=op.f("ck_webhook_deliveries_state")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_webhook_deliveries_run_id_runs"),
                                ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
    )
    op.create_index(op.f("ix_webhook_deliveries_state_received_at"), "webhook_deliveries", ["state", "received_at"])
    op.create_table(
        "run_reports",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("repository", sa.String(length=200), nullable=False),
        sa.Column("pull_request", sa.Integer(), nullable=True),
        sa.Column("head_sha", sa.String(length=40), nullable=False),
        sa.Column("base_sha", sa.String(length=40), nullable=True),
        sa.Column("merge_base", sa.String(length=40), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("reported_at", UTC_DATETIME, nullable=True),
        sa.CheckConstraint("state IN ('waiting', 'posted', 'kept', 'failed', 'superseded')", name=op.f("ck_run_reports_state")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_run_reports_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_reports")),
        sa.UniqueConstraint("run_id", name=op.f("uq_run_reports_run_id")),
    )
    op.create_index(op.f("ix_run_reports_state_created_at"), "run_reports", ["state", "created_at"])
    with op.batch_alter_table("build_requests") as batch:
        batch.add_column(sa.Column("base_sha", sa.String(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("build_requests") as batch:
        batch.drop_column("base_sha")
    op.drop_index(op.f("ix_run_reports_state_created_at"), table_name="run_reports")
    op.drop_table("run_reports")
    op.drop_index(op.f("ix_webhook_deliveries_state_received_at"), table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
