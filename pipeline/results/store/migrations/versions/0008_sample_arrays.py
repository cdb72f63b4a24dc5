"""Samples as one array per measurement instead of one row per sample.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24

A full suite's paired job is millions of samples; as rows (`samples`, `paired_samples`: ~40 bytes
and an index entry each) it took minutes to write. Now:
- `measurements.samples`: the samples, float64 little-endian, in the order taken (`n` of them);
- `measurements.sample_clocks`: the SM clock read with each sample, same form; NULL when not reported;
- `case_results.paired_samples`: the paired base's samples, same form; NULL when not paired.
The codec is `pipeline.contracts.arrays` (`to_blob` / `from_blob`), the one the result document
uses on the wire. Existing rows are moved into the arrays (a measurement at a time, in batches),
then the `samples` and `paired_samples` tables are dropped. The downgrade moves them back.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from pipeline.contracts.arrays import from_blob, to_blob

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_BATCH = 2000
"""Owners (measurements or case results) moved per round trip."""


def _id_ranges(connection: sa.Connection, table: str) -> Iterator[tuple[int, int]]:
    """(first, last) id of consecutive batches of a table's rows, in id order."""
    ids = [row[0] for row in connection.execute(sa.text(f"SELECT id FROM {table} ORDER BY id"))]
    for start in range(0, len(ids), _BATCH):
        chunk = ids[start:start + _BATCH]
        yield chunk[0], chunk[-1]


def _grouped(rows: Sequence[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for owner, *values in rows:
        out.setdefault(owner, []).append(values)
    return out


def _rows_to_arrays(connection: sa.Connection) -> None:
    for first, last in _id_ranges(connection, "measurements"):
        rows = connection.execute(sa.text(
            "SELECT measurement_id, value, clock_mhz FROM samples WHERE measurement_id BETWEEN :a AND :b "
            "ORDER BY measurement_id, idx"), {"a": first, "b": last}).all()
        updates = []
        for owner, values in _grouped(rows).items():
            clocks = [c for _, c in values]
            updates.append({"id": owner, "samples": to_blob([v for v, _ in values]),
                            "clocks": to_blob(clocks) if all(c is not None for c in clocks) else None})
        if updates:
            connection.execute(sa.text("UPDATE measurements SET samples = :samples, sample_clocks = :clocks "
                                       "WHERE id = :id"), updates)
    connection.execute(sa.text("UPDATE measurements SET samples = :empty WHERE samples IS NULL"), {"empty": b""})
    for first, last in _id_ranges(connection, "case_results"):
        rows = connection.execute(sa.text(
            "SELECT case_result_id, value FROM paired_samples WHERE case_result_id BETWEEN :a AND :b "
            "ORDER BY case_result_id, idx"), {"a": first, "b": last}).all()
        updates = [{"id": owner, "paired": to_blob([v for (v,) in values])}
                   for owner, values in _grouped(rows).items()]
        if updates:
            connection.execute(sa.text("UPDATE case_results SET paired_samples = :paired WHERE id = :id"), updates)


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("samples", sa.LargeBinary(), nullable=True))
        batch.add_column(sa.Column("sample_clocks", sa.LargeBinary(), nullable=True))
    with op.batch_alter_table("case_results") as batch:
        batch.add_column(sa.Column("paired_samples", sa.LargeBinary(), nullable=True))
    _rows_to_arrays(op.get_bind())
    # Dropped before measurements is altered: SQLite alters it by copying it and dropping the old
    # table, which would first delete every row of samples (ON DELETE CASCADE), one by one.
    op.drop_table("samples")
    op.drop_table("paired_samples")
    with op.batch_alter_table("measurements") as batch:
        batch.alter_column("samples", existing_type=sa.LargeBinary(), nullable=False)


def downgrade() -> None:
    op.create_table(
        "samples",
        sa.Column("measurement_id", BIG_ID, nullable=False),
        sa.Column("idx", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.Column("clock_mhz", sa.REAL(), nullable=True),
        sa.ForeignKeyConstraint(["measurement_id"], ["measurements.id"],
                                name=op.f("fk_samples_measurement_id_measurements"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("measurement_id", "idx", name=op.f("pk_samples")),
    )
    op.create_table(
        "paired_samples",
        sa.Column("case_result_id", BIG_ID, nullable=False),
        sa.Column("idx", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["case_result_id"], ["case_results.id"],
                                name=op.f("fk_paired_samples_case_result_id_case_results"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("case_result_id", "idx", name=op.f("pk_paired_samples")),
    )
    connection = op.get_bind()
    samples, paired = sa.table("samples", *map(sa.column, ("measurement_id", "idx", "value", "clock_mhz"))), \
        sa.table("paired_samples", *map(sa.column, ("case_result_id", "idx", "value")))
    for first, last in _id_ranges(connection, "measurements"):
        rows = []
        for owner, blob, clock_blob in connection.execute(sa.text(
                "SELECT id, samples, sample_clocks FROM measurements WHERE id BETWEEN :a AND :b"), {"a": first, "b": last}):
            clocks = from_blob(clock_blob) if clock_blob is not None else None
            rows += [{"measurement_id": owner, "idx": i, "value": v, "clock_mhz": clocks[i] if clocks else None}
                     for i, v in enumerate(from_blob(blob))]
        if rows:
            connection.execute(sa.insert(samples), rows)
    for first, last in _id_ranges(connection, "case_results"):
        rows = [{"case_result_id": owner, "idx": i, "value": v}
                for owner, blob in connection.execute(sa.text(
                    "SELECT id, paired_samples FROM case_results WHERE id BETWEEN :a AND :b "
                    "AND paired_samples IS NOT NULL"), {"a": first, "b": last})
                for i, v in enumerate(from_blob(blob))]
        if rows:
            connection.execute(sa.insert(paired), rows)
    # ALTER TABLE ... DROP COLUMN in place (SQLite >= 3.35 too), not batch mode: SQLite's batch mode
    # copies the table and drops the old one, which would delete the rows just written into
    # samples and paired_samples (ON DELETE CASCADE).
    op.drop_column("case_results", "paired_samples")
    op.drop_column("measurements", "sample_clocks")
    op.drop_column("measurements", "samples")
