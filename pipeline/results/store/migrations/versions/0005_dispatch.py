"""The built-in dispatcher: agents, device presence, job leases, build requests.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22

- `agents`: registered device agents (name, the token they registered with, host, version,
  state online/offline, last heartbeat);
- `devices.agent_id`, `devices.online`: the device registry of the dispatcher (a device is online
  while its agent lists it in heartbeats);
- `jobs`: the lease (`lease_owner`, `lease_expires_at`), `max_attempts`, a `cases` glob, the
  `base_bundle_digest` of paired jobs and the `device_id` that runs the latest attempt; a queued
  job is claimable once `bundle_digest` is set (statuses unchanged);
- `build_requests`: runs whose commit the service builds before their jobs can be claimed.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("token_name", sa.String(length=100), nullable=False),
        sa.Column("host", sa.String(length=200), nullable=False),
        sa.Column("version", sa.String(length=100), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("registered_at", UTC_DATETIME, nullable=False),
        sa.Column("last_heartbeat", UTC_DATETIME, nullable=False),
        sa.CheckConstraint("state IN ('online', 'offline')", name=op.f("ck_agents_state")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agents")),
        sa.UniqueConstraint("name", name=op.f("uq_agents_name")),
    )
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("agent_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("online", sa.Boolean(), server_default=sa.false(), nullable=False))
        batch.create_foreign_key(op.f("fk_devices_agent_id_agents"), "agents", ["agent_id"], ["id"],
                                 ondelete="SET NULL")
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("base_bundle_digest", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("cases", sa.String(length=400), nullable=True))
        batch.add_column(sa.Column("max_attempts", sa.Integer(), server_default="3", nullable=False))
        batch.add_column(sa.Column("lease_owner", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", UTC_DATETIME, nullable=True))
        batch.add_column(sa.Column("device_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(op.f("fk_jobs_device_id_devices"), "devices", ["device_id"], ["id"],
                                 ondelete="SET NULL")
    op.create_table(
        "build_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("targets", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("bundle_digest", sa.String(length=64), nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("started_at", UTC_DATETIME, nullable=True),
        sa.Column("finished_at", UTC_DATETIME, nullable=True),
        sa.CheckConstraint("status IN ('pending', 'building', 'done', 'failed')", name=op.f("ck_build_requests_status")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_build_requests_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_build_requests")),
        sa.UniqueConstraint("run_id", name=op.f("uq_build_requests_run_id")),
    )
    op.create_index(op.f("ix_build_requests_status_created_at"), "build_requests", ["status", "created_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_build_requests_status_created_at"), table_name="build_requests")
    op.drop_table("build_requests")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(op.f("fk_jobs_device_id_devices"), type_="foreignkey")
        for column in ("device_id", "lease_expires_at", "lease_owner", "max_attempts", "cases", "base_bundle_digest"):
            batch.drop_column(column)
    with op.batch_alter_table("devices") as batch:
        batch.drop_constraint(op.f("fk_devices_agent_id_agents"), type_="foreignkey")
        batch.drop_column("online")
        batch.drop_column("agent_id")
    op.drop_table("agents")
