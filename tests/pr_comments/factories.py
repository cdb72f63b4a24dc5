"""Comparisons built by hand, in the shape pipeline.results.store.compare returns."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pipeline.contracts.ids import CaseId
from pipeline.results.store.compare import STATUSES, ComparisonOut, ComparisonRowOut

HEAD = "a" * 40
BASE = "b" * 40


class NotedRow(ComparisonRowOut):
    """A row as the analysis may extend it: with a note (the comment shows a row's `note` when it has one)."""

    note: str | None = None


def row(case: str | CaseId, status: str, change: float | None = 0.0, *, base: float | None = 1e-3,
        pvalue: float | None = 1e-4, **fields: Any) -> ComparisonRowOut:
    """A triton row on cuda:sm_90; `fields` set any other field (model, drift, is_control, ci_low,
    head_median...), and `note` makes it a NotedRow."""
    head = None if base is None or change is None else base * (1 + change)
    values = {"case_id": case, "target": "cuda:sm_90", "model": "triton", "base_median": base, "head_median": head,
              "change": change, "ci_low": None, "ci_high": None, "pvalue": pvalue, "threshold": None,
              "status": status, "paired": False, "same_binary": False, "same_code": False, "is_control": False, "control_case": None,
              "control_change": None, "control_pvalue": None, "drift": False, "counters": None, "code": None} | fields
    return (NotedRow if "note" in fields else ComparisonRowOut)(**values)


def comparison(device_class: str, rows: list[ComparisonRowOut], *, repository: str = "acme/kernels",
               head: str = HEAD, base: str | None = BASE) -> ComparisonOut:
    counts = Counter(r.status for r in rows)
    return ComparisonOut(repository=repository, head_sha=head, base_sha=base, device_class=device_class,
                         merge_base=None, base_source="none", verdict="no baseline", errored=0, drift=0, paired=False,
                         counts={s: counts.get(s, 0) for s in STATUSES}, rows=rows)
