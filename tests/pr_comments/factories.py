"""Comparisons built by hand, in the shape pipeline.store.compare returns."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from pipeline.contracts.ids import CaseId
from pipeline.store.compare import STATUSES, Comparison, ComparisonRow

HEAD = "a" * 40
BASE = "b" * 40


def row(case: str | CaseId, status: str, change: float | None = 0.0, *, base: float | None = 1e-3,
        pvalue: float | None = 1e-4) -> ComparisonRow:
    head = None if base is None or change is None else base * (1 + change)
    case_id = CaseId.parse(case) if isinstance(case, str) else case
    return ComparisonRow(case_id, "cuda:sm_90", "triton", base, head, change, pvalue, status)


def comparison(device_class: str, rows: list[ComparisonRow], *, repository: str = "acme/kernels",
               head: str = HEAD, base: str | None = BASE) -> Comparison:
    counts = Counter(r.status for r in rows)
    return Comparison(repository, head, base, device_class, rows, {s: counts.get(s, 0) for s in STATUSES})


@dataclass(frozen=True)
class DriftRow(ComparisonRow):
    """A row as the analysis will extend it (optional drift flag and note)."""

    drift: bool = False
    note: str | None = None
