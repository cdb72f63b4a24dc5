"""Commits' generation: `commits.generation`, the number of recorded first-parent ancestors.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27

History was ordered by commit time: commits made in one second (a rebase, a script) or on machines
whose clocks disagree came out of order on series pages, in change points and in the choice of the
default-branch head. History is now ordered by ancestry; the generation lets every query sort by it.
Existing commits get theirs from the parents already stored (the same walk `history` does; written
out here so that this migration stays as it is when that code changes).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _generations(rows: Sequence[tuple[int, str, str | None]]) -> dict[int, int]:
    # pipeline.results.store.history's, as of this migration: a migration keeps what it did, whatever the code becomes
    parent_of = {sha: parent for _, sha, parent in rows}
    id_of = {sha: commit_id for commit_id, sha, _ in rows}
    depth: dict[str, int] = {}
    for _, sha, _ in rows:
        path: list[str] = []
        seen: set[str] = set()
        current: str | None = sha
        while current is not None and current in id_of and current not in depth and current not in seen:
            path.append(current)
            seen.add(current)
            current = parent_of[current]
        level = depth[current] if current is not None and current in depth else -1
        for walked in reversed(path):
            level += 1
            depth[walked] = level
    return {id_of[sha]: d for sha, d in depth.items()}


def upgrade() -> None:
    with op.batch_alter_table("commits") as batch:
        batch.add_column(sa.Column("generation", sa.Integer, nullable=False, server_default="0"))
    op.create_index("ix_commits_repository_id_generation", "commits", ["repository_id", "generation"])
    bind = op.get_bind()
    rows = bind.execute(sa.text(
        "SELECT c.id, c.repository_id, c.sha, p.parent_sha FROM commits c "
        "LEFT JOIN commit_parents p ON p.commit_id = c.id AND p.position = 0")).all()
    by_repository: dict[int, list[tuple[int, str, str | None]]] = {}
    for commit_id, repository_id, sha, parent in rows:
        by_repository.setdefault(repository_id, []).append((commit_id, sha, parent))
    updates = [{"i": commit_id, "g": generation} for commits in by_repository.values()
               for commit_id, generation in _generations(commits).items() if generation]
    if updates:
        bind.execute(sa.text("UPDATE commits SET generation = :g WHERE id = :i"), updates)


def downgrade() -> None:
    op.drop_index("ix_commits_repository_id_generation", "commits")
    # ALTER TABLE ... DROP COLUMN, also on SQLite (3.35+): no copy of the table, as batch mode would make
    op.drop_column("commits", "generation")
