"""History analysis and PR verdicts: change points, triage events, series settings, paired samples.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21

- `series`: per-series settings (min_magnitude, lower_is_better; NULL = defaults) and the
  analysis state (history_points, analyzed_at);
- `change_points`, `triage_events` (a change point's state is its latest event, copied onto
  `change_points.state` for one-index filtering);
- `case_results.paired_base_commit_id` and `paired_samples`: a job that ran base and head
  interleaved (result contract: `CaseResult.paired_base`);
- indexes: commits by (repository, committed_at) and (repository, branch, committed_at) for the
  commit list and the default-branch head; change points by (series, committed_at) for a series'
  page and the dashboard, and by (direction, state, committed_at) for the open regressions list.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTC_DATETIME = sa.DateTime(timezone=True)
TRIAGE_STATES = "'needs triage', 'noisy', 'confirmed', 'intended', 'assigned', 'fixed'"


def upgrade() -> None:
    with op.batch_alter_table("series") as batch:
        batch.add_column(sa.Column("min_magnitude", sa.Double(), nullable=True))
        batch.add_column(sa.Column("lower_is_better", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("history_points", sa.Integer(), server_default="0", nullable=False))
        batch.add_column(sa.Column("analyzed_at", UTC_DATETIME, nullable=True))
    with op.batch_alter_table("case_results") as batch:
        batch.add_column(sa.Column("paired_base_commit_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(op.f("fk_case_results_paired_base_commit_id_commits"), "commits",
                                 ["paired_base_commit_id"], ["id"])
    op.create_index(op.f("ix_commits_repository_id_committed_at"), "commits", ["repository_id", "committed_at"])
    op.create_index(op.f("ix_commits_repository_id_branch_committed_at"), "commits",
                    ["repository_id", "branch", "committed_at"])

    op.create_table(
        "paired_samples",
        sa.Column("case_result_id", BIG_ID, nullable=False),
        sa.Column("idx", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["case_result_id"], ["case_results.id"],
                                name=op.f("fk_paired_samples_case_result_id_case_results"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("case_result_id", "idx", name=op.f("pk_paired_samples")),
    )
    op.create_table(
        "change_points",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("before_commit_id", sa.Integer(), nullable=False),
        sa.Column("after_commit_id", sa.Integer(), nullable=False),
        sa.Column("committed_at", UTC_DATETIME, nullable=False),
        sa.Column("history_index", sa.Integer(), nullable=False),
        sa.Column("before_level", sa.Double(), nullable=False),
        sa.Column("after_level", sa.Double(), nullable=False),
        sa.Column("magnitude", sa.Double(), nullable=False),
        sa.Column("pvalue", sa.Double(), nullable=False),
        sa.Column("direction", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("detected_at", UTC_DATETIME, nullable=False),
        sa.CheckConstraint("direction IN ('regression', 'improvement')", name=op.f("ck_change_points_direction")),
        sa.CheckConstraint(f"state IN ({TRIAGE_STATES})", name=op.f("ck_change_points_state")),
        sa.ForeignKeyConstraint(["after_commit_id"], ["commits.id"], name=op.f("fk_change_points_after_commit_id_commits")),
        sa.ForeignKeyConstraint(["before_commit_id"], ["commits.id"],
                                name=op.f("fk_change_points_before_commit_id_commits")),
        sa.ForeignKeyConstraint(["series_id"], ["series.id"], name=op.f("fk_change_points_series_id_series"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_change_points")),
        sa.UniqueConstraint("series_id", "after_commit_id", name=op.f("uq_change_points_series_id_after_commit_id")),
    )
    op.create_index(op.f("ix_change_points_series_id_committed_at"), "change_points", ["series_id", "committed_at"])
    op.create_index(op.f("ix_change_points_direction_state_committed_at"), "change_points",
                    ["direction", "state", "committed_at"])
    op.create_table(
        "triage_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("change_point_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("who", sa.String(length=200), nullable=False),
        sa.Column("at", UTC_DATETIME, nullable=False),
        sa.Column("bug_link", sa.String(length=1000), nullable=True),
        sa.Column("assignee", sa.String(length=200), nullable=True),
        sa.Column("note", sa.Text(), nullable=False),
        sa.CheckConstraint(f"state IN ({TRIAGE_STATES})", name=op.f("ck_triage_events_state")),
        sa.ForeignKeyConstraint(["change_point_id"], ["change_points.id"],
                                name=op.f("fk_triage_events_change_point_id_change_points"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_triage_events")),
    )
    op.create_index(op.f("ix_triage_events_change_point_id_at"), "triage_events", ["change_point_id", "at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_triage_events_change_point_id_at"), table_name="triage_events")
    op.drop_table("triage_events")
    op.drop_index(op.f("ix_change_points_direction_state_committed_at"), table_name="change_points")
    op.drop_index(op.f("ix_change_points_series_id_committed_at"), table_name="change_points")
    op.drop_table("change_points")
    op.drop_table("paired_samples")
    op.drop_index(op.f("ix_commits_repository_id_branch_committed_at"), table_name="commits")
    op.drop_index(op.f("ix_commits_repository_id_committed_at"), table_name="commits")
    with op.batch_alter_table("case_results") as batch:
        batch.drop_constraint(op.f("fk_case_results_paired_base_commit_id_commits"), type_="foreignkey")
        batch.drop_column("paired_base_commit_id")
    with op.batch_alter_table("series") as batch:
        batch.drop_column("analyzed_at")
        batch.drop_column("history_points")
        batch.drop_column("lower_is_better")
        batch.drop_column("min_magnitude")
