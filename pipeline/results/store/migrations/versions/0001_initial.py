"""Initial schema: repositories, commits, devices, cases, series, bundles, runs, jobs, results, samples.

Revision ID: 0001
Revises:
Create Date: 2026-11-21

Written out in full (not generated at run time); the test suite checks that upgrading an empty
database gives exactly the schema of `pipeline.results.store.models`.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# 64-bit keys where tables grow with every upload; SQLite autoincrements only INTEGER PRIMARY KEY.
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table('cases',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('case_id', sa.String(length=400), nullable=False),
    sa.Column('family', sa.String(length=100), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('shape', sa.String(length=200), nullable=False),
    sa.Column('dtype', sa.String(length=32), nullable=False),
    sa.Column('impl', sa.String(length=64), nullable=False),
    sa.Column('model', sa.String(length=200), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_cases')),
    sa.UniqueConstraint('case_id', name=op.f('uq_cases_case_id'))
    )
    op.create_table('device_classes',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('targets', sa.JSON(), nullable=False),
    sa.Column('runtime', sa.String(length=32), nullable=False),
    sa.Column('hal_driver', sa.String(length=64), nullable=True),
    sa.Column('description', sa.Text(), nullable=False),
    sa.CheckConstraint("kind IN ('cpu', 'gpu', 'phone')", name=op.f('ck_device_classes_kind')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_device_classes')),
    sa.UniqueConstraint('name', name=op.f('uq_device_classes_name'))
    )
    op.create_table('repositories',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('url', sa.String(length=500), nullable=True),
    sa.Column('default_branch', sa.String(length=200), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_repositories')),
    sa.UniqueConstraint('name', name=op.f('uq_repositories_name'))
    )
    op.create_table('commits',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('repository_id', sa.Integer(), nullable=False),
    sa.Column('sha', sa.String(length=40), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('author', sa.String(length=300), nullable=False),
    sa.Column('committed_at', UTC_DATETIME, nullable=False),
    sa.Column('branch', sa.String(length=300), nullable=True),
    sa.Column('pull_request', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['repository_id'], ['repositories.id'], name=op.f('fk_commits_repository_id_repositories'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_commits')),
    sa.UniqueConstraint('repository_id', 'sha', name=op.f('uq_commits_repository_id_sha'))
    )
    op.create_table('devices',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uid', sa.String(length=200), nullable=False),
    sa.Column('device_class_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('host', sa.String(length=200), nullable=False),
    sa.Column('driver', sa.String(length=200), nullable=True),
    sa.Column('first_seen', UTC_DATETIME, nullable=False),
    sa.Column('last_seen', UTC_DATETIME, nullable=False),
    sa.ForeignKeyConstraint(['device_class_id'], ['device_classes.id'], name=op.f('fk_devices_device_class_id_device_classes')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_devices')),
    sa.UniqueConstraint('uid', name=op.f('uq_devices_uid'))
    )
    op.create_table('series',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('case_id', sa.Integer(), nullable=False),
    sa.Column('device_class_id', sa.Integer(), nullable=False),
    sa.Column('metric', sa.String(length=32), nullable=False),
    sa.ForeignKeyConstraint(['case_id'], ['cases.id'], name=op.f('fk_series_case_id_cases')),
    sa.ForeignKeyConstraint(['device_class_id'], ['device_classes.id'], name=op.f('fk_series_device_class_id_device_classes')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_series')),
    sa.UniqueConstraint('case_id', 'device_class_id', 'metric', name=op.f('uq_series_case_id_device_class_id_metric'))
    )
    op.create_table('bundles',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('digest', sa.String(length=64), nullable=False),
    sa.Column('repository_id', sa.Integer(), nullable=False),
    sa.Column('commit_id', sa.Integer(), nullable=False),
    sa.Column('suite_digest', sa.String(length=100), nullable=False),
    sa.Column('path', sa.String(length=1000), nullable=False),
    sa.Column('created_at', UTC_DATETIME, nullable=False),
    sa.ForeignKeyConstraint(['commit_id'], ['commits.id'], name=op.f('fk_bundles_commit_id_commits')),
    sa.ForeignKeyConstraint(['repository_id'], ['repositories.id'], name=op.f('fk_bundles_repository_id_repositories')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_bundles')),
    sa.UniqueConstraint('digest', name=op.f('uq_bundles_digest'))
    )
    op.create_index(op.f('ix_bundles_commit_id'), 'bundles', ['commit_id'], unique=False)
    op.create_table('commit_parents',
    sa.Column('commit_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('parent_sha', sa.String(length=40), nullable=False),
    sa.ForeignKeyConstraint(['commit_id'], ['commits.id'], name=op.f('fk_commit_parents_commit_id_commits'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('commit_id', 'position', name=op.f('pk_commit_parents'))
    )
    op.create_table('runs',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('repository_id', sa.Integer(), nullable=False),
    sa.Column('commit_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('created_at', UTC_DATETIME, nullable=False),
    sa.Column('finished_at', UTC_DATETIME, nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.CheckConstraint("kind IN ('local', 'adhoc', 'pr', 'push', 'nightly')", name=op.f('ck_runs_kind')),
    sa.CheckConstraint("status IN ('queued', 'running', 'done', 'failed')", name=op.f('ck_runs_status')),
    sa.ForeignKeyConstraint(['commit_id'], ['commits.id'], name=op.f('fk_runs_commit_id_commits')),
    sa.ForeignKeyConstraint(['repository_id'], ['repositories.id'], name=op.f('fk_runs_repository_id_repositories')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_runs'))
    )
    op.create_index(op.f('ix_runs_commit_id'), 'runs', ['commit_id'], unique=False)
    op.create_index(op.f('ix_runs_created_at'), 'runs', ['created_at'], unique=False)
    op.create_table('compile_stats',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('bundle_id', sa.Integer(), nullable=False),
    sa.Column('case_id', sa.Integer(), nullable=False),
    sa.Column('target', sa.String(length=100), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('compiler', sa.String(length=100), nullable=True),
    sa.Column('compiler_version', sa.String(length=100), nullable=True),
    sa.Column('compile_time_s', sa.Double(), nullable=True),
    sa.Column('binary_bytes', sa.BigInteger(), nullable=True),
    sa.Column('registers', sa.Integer(), nullable=True),
    sa.Column('spills', sa.Integer(), nullable=True),
    sa.Column('shared_bytes', sa.Integer(), nullable=True),
    sa.CheckConstraint("status IN ('built', 'failed')", name=op.f('ck_compile_stats_status')),
    sa.ForeignKeyConstraint(['bundle_id'], ['bundles.id'], name=op.f('fk_compile_stats_bundle_id_bundles'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['case_id'], ['cases.id'], name=op.f('fk_compile_stats_case_id_cases')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_compile_stats')),
    sa.UniqueConstraint('bundle_id', 'case_id', 'target', name=op.f('uq_compile_stats_bundle_id_case_id_target'))
    )
    op.create_table('jobs',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('device_class_id', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('agent', sa.String(length=200), nullable=True),
    sa.Column('bundle_digest', sa.String(length=64), nullable=True),
    sa.Column('created_at', UTC_DATETIME, nullable=False),
    sa.Column('started_at', UTC_DATETIME, nullable=True),
    sa.Column('finished_at', UTC_DATETIME, nullable=True),
    sa.CheckConstraint("status IN ('queued', 'running', 'done', 'failed')", name=op.f('ck_jobs_status')),
    sa.ForeignKeyConstraint(['device_class_id'], ['device_classes.id'], name=op.f('fk_jobs_device_class_id_device_classes')),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_jobs_run_id_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_jobs')),
    sa.UniqueConstraint('run_id', 'device_class_id', name=op.f('uq_jobs_run_id_device_class_id'))
    )
    op.create_index(op.f('ix_jobs_status_device_class_id'), 'jobs', ['status', 'device_class_id'], unique=False)
    op.create_table('case_results',
    sa.Column('id', BIG_ID, nullable=False),
    sa.Column('job_id', sa.String(length=64), nullable=False),
    sa.Column('case_id', sa.Integer(), nullable=False),
    sa.Column('target', sa.String(length=100), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('max_abs_error', sa.Double(), nullable=True),
    sa.Column('max_rel_error', sa.Double(), nullable=True),
    sa.Column('device_id', sa.Integer(), nullable=True),
    sa.CheckConstraint("status IN ('ok', 'wrong', 'error', 'skipped')", name=op.f('ck_case_results_status')),
    sa.ForeignKeyConstraint(['case_id'], ['cases.id'], name=op.f('fk_case_results_case_id_cases')),
    sa.ForeignKeyConstraint(['device_id'], ['devices.id'], name=op.f('fk_case_results_device_id_devices')),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_case_results_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_case_results')),
    sa.UniqueConstraint('job_id', 'case_id', 'target', name=op.f('uq_case_results_job_id_case_id_target'))
    )
    op.create_table('measurements',
    sa.Column('id', BIG_ID, nullable=False),
    sa.Column('case_result_id', BIG_ID, nullable=False),
    sa.Column('series_id', sa.Integer(), nullable=False),
    sa.Column('commit_id', sa.Integer(), nullable=False),
    sa.Column('n', sa.Integer(), nullable=False),
    sa.Column('median', sa.Double(), nullable=False),
    sa.Column('mean', sa.Double(), nullable=False),
    sa.Column('stdev', sa.Double(), nullable=False),
    sa.Column('min', sa.Double(), nullable=False),
    sa.Column('max', sa.Double(), nullable=False),
    sa.ForeignKeyConstraint(['case_result_id'], ['case_results.id'], name=op.f('fk_measurements_case_result_id_case_results'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['commit_id'], ['commits.id'], name=op.f('fk_measurements_commit_id_commits')),
    sa.ForeignKeyConstraint(['series_id'], ['series.id'], name=op.f('fk_measurements_series_id_series')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_measurements')),
    sa.UniqueConstraint('case_result_id', name=op.f('uq_measurements_case_result_id'))
    )
    op.create_index(op.f('ix_measurements_commit_id'), 'measurements', ['commit_id'], unique=False)
    op.create_index(op.f('ix_measurements_series_id_commit_id'), 'measurements', ['series_id', 'commit_id'], unique=False)
    op.create_table('samples',
    sa.Column('measurement_id', BIG_ID, nullable=False),
    sa.Column('idx', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('value', sa.Double(), nullable=False),
    sa.Column('clock_mhz', sa.REAL(), nullable=True),
    sa.ForeignKeyConstraint(['measurement_id'], ['measurements.id'], name=op.f('fk_samples_measurement_id_measurements'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('measurement_id', 'idx', name=op.f('pk_samples'))
    )


def downgrade() -> None:
    op.drop_table('samples')
    op.drop_index(op.f('ix_measurements_series_id_commit_id'), table_name='measurements')
    op.drop_index(op.f('ix_measurements_commit_id'), table_name='measurements')
    op.drop_table('measurements')
    op.drop_table('case_results')
    op.drop_index(op.f('ix_jobs_status_device_class_id'), table_name='jobs')
    op.drop_table('jobs')
    op.drop_table('compile_stats')
    op.drop_index(op.f('ix_runs_created_at'), table_name='runs')
    op.drop_index(op.f('ix_runs_commit_id'), table_name='runs')
    op.drop_table('runs')
    op.drop_table('commit_parents')
    op.drop_index(op.f('ix_bundles_commit_id'), table_name='bundles')
    op.drop_table('bundles')
    op.drop_table('series')
    op.drop_table('devices')
    op.drop_table('commits')
    op.drop_table('repositories')
    op.drop_table('device_classes')
    op.drop_table('cases')
