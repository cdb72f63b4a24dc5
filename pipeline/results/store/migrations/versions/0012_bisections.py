"""Bisections: from a change point's commit range to the culprit commit.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24

- `bisections`: one search per change point and device class (cases, base and bad commits, the
  range's first-parent commits, state, outcome, culprit, result, bounds, device time used); at most
  one active (queued or running) per change point, by a partial unique index;
- `bisection_steps`: each commit run paired with the base (its run and job, the paired change with
  its interval, the verdict, or why it was skipped).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)
ACTIVE = sa.text("state IN ('queued', 'running')")


def upgrade() -> None:
    op.create_table(
        "bisections",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("change_point_id", sa.Integer(), nullable=False),
        sa.Column("repository_id", sa.Integer(), nullable=False),
        sa.Column("device_class_id", sa.Integer(), nullable=False),
        sa.Column("cases", sa.JSON(), nullable=False),
        sa.Column("base_commit_id", sa.Integer(), nullable=False),
        sa.Column("bad_commit_id", sa.Integer(), nullable=False),
        sa.Column("commits", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("outcome", sa.String(length=32), nullable=True),
        sa.Column("culprit_commit_id", sa.Integer(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("max_steps", sa.Integer(), nullable=False),
        sa.Column("max_device_s", sa.Double(), nullable=False),
        sa.Column("device_s", sa.Double(), nullable=False),
        sa.Column("requested_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("started_at", UTC_DATETIME, nullable=True),
        sa.Column("finished_at", UTC_DATETIME, nullable=True),
        sa.CheckConstraint("state IN ('queued', 'running', 'done', 'failed', 'cancelled')",
                           name=op.f("ck_bisections_state")),
        sa.ForeignKeyConstraint(["change_point_id"], ["change_points.id"],
                                name=op.f("fk_bisections_change_point_id_change_points"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["repository_id"], ["repositories.id"],
                                name=op.f("fk_bisections_repository_id_repositories")),
        sa.ForeignKeyConstraint(["device_class_id"], ["device_classes.id"],
                                name=op.f("fk_bisections_device_class_id_device_classes")),
        sa.ForeignKeyConstraint(["base_commit_id"], ["commits.id"], name=op.f("fk_bisections_base_commit_id_commits")),
        sa.ForeignKeyConstraint(["bad_commit_id"], ["commits.id"], name=op.f("fk_bisections_bad_commit_id_commits")),
        sa.ForeignKeyConstraint(["culprit_commit_id"], ["commits.id"],
                                name=op.f("fk_bisections_culprit_commit_id_commits")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bisections")),
    )
    op.create_index(op.f("ix_bisections_change_point_id"), "bisections", ["change_point_id"])
    op.create_index(op.f("ix_bisections_state_created_at"), "bisections", ["state", "created_at"])
    op.create_index("ix_bisections_one_active", "bisections", ["change_point_id"], unique=True,
                    sqlite_where=ACTIVE, postgresql_where=ACTIVE)
    op.create_table(
        "bisection_steps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("bisection_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("commit_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("verdict", sa.String(length=32), nullable=True),
        sa.Column("change", sa.Double(), nullable=True),
        sa.Column("ci_low", sa.Double(), nullable=True),
        sa.Column("ci_high", sa.Double(), nullable=True),
        sa.Column("pvalue", sa.Double(), nullable=True),
        sa.Column("paired", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("device_s", sa.Double(), nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("finished_at", UTC_DATETIME, nullable=True),
        sa.CheckConstraint("state IN ('queued', 'done', 'skipped')", name=op.f("ck_bisection_steps_state")),
        sa.ForeignKeyConstraint(["bisection_id"], ["bisections.id"],
                                name=op.f("fk_bisection_steps_bisection_id_bisections"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["commit_id"], ["commits.id"], name=op.f("fk_bisection_steps_commit_id_commits")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_bisection_steps_run_id_runs"),
                                ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_bisection_steps_job_id_jobs"),
                                ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bisection_steps")),
        sa.UniqueConstraint("bisection_id", "position", name=op.f("uq_bisection_steps_bisection_id_position")),
    )


def downgrade() -> None:
    op.drop_table("bisection_steps")
    op.drop_index("ix_bisections_one_active", table_name="bisections")
    op.drop_index(op.f("ix_bisections_state_created_at"), table_name="bisections")
    op.drop_index(op.f("ix_bisections_change_point_id"), table_name="bisections")
    op.drop_table("bisections")
