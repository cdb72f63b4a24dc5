"""Hardware counters in comparisons: what moved between a case's base and head binaries, beside latency.

The counters of a result (`pipeline.contracts.counters`; stored in `counter_values`, one series per
case, device class and counter) are nearly deterministic: two launches of one binary on the same inputs
count the same instructions, so any difference there is a change of the code path, whatever the timing's
noise; DRAM bytes and the L2 hit rate depend on what the cache kept, and differ a little between two
readings of one binary (`Counter.tolerance` and `relative_tolerance`, measured on an H200).
They are shown beside the latency verdict and never decide it: a regressed or inconclusive row says
what moved ("DRAM bytes +18 %, instructions +0 %"), an unchanged count says the code path is the same.

A row's base counters are its paired base's (taken in the same job on the same inputs) when the head
was paired, else the base result's own. A head without counters says why (its result's environment,
`COUNTERS_KEY`), so that "no counters" is never mistaken for "no change".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from pipeline.contracts.counters import COUNTERS, COUNTERS_KEY
from pipeline.store.models import CaseResultRow, CounterValue, Series

__all__ = ["CounterChangeOut", "CountersOut", "counter_changes", "counters_summary", "result_counters", "row_counters"]

DRAM = ("dram_read_bytes", "dram_write_bytes")
"""Shown together in a summary, as "DRAM bytes" (read + written)."""


class CounterChangeOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    counter: str = Field(description="instructions | dram_read_bytes | dram_write_bytes | l2_hit_rate | achieved_occupancy")
    unit: str
    base: float | None
    head: float | None
    change: float | None = Field(description="head / base - 1; None when a side is missing or base is 0")
    moved: bool = Field(description="the two differ by more than the counter's tolerance (instructions: any "
                                    "difference is a change of the code path)")


class CountersOut(BaseModel):
    """A comparison row's counters (`ComparisonRowOut.counters`)."""

    model_config = ConfigDict(frozen=True)

    changes: list[CounterChangeOut] = Field(description="every counter either side has, in the order they are shown")
    summary: str = Field(description='what moved, e.g. "DRAM bytes +18 %, instructions +0 %"; "counters unchanged"; '
                                     "or why there are none")


def _moved(name: str, base: float | None, head: float | None) -> bool:
    if base is None or head is None:
        return base is not head
    counter = COUNTERS[name]
    return abs(head - base) > max(counter.tolerance, counter.relative_tolerance * abs(base))


def counter_changes(base: Mapping[str, float] | None, head: Mapping[str, float] | None) -> list[CounterChangeOut]:
    """Each counter either side has, base against head, in `COUNTERS` order."""
    base, head = base or {}, head or {}
    out = []
    for name, counter in COUNTERS.items():
        b, h = base.get(name), head.get(name)
        if b is None and h is None:
            continue
        change = h / b - 1.0 if b and h is not None else (0.0 if b == 0 and h == 0 else None)
        out.append(CounterChangeOut(counter=name, unit=counter.unit, base=b, head=h, change=change,
                                    moved=_moved(name, b, h)))
    return out


def _percent(change: float) -> str:
    value = change * 100
    if value == 0:
        return "+0 %"
    return f"{value:+.0f} %" if abs(value) >= 10 else f"{value:+.1f} %" if abs(value) >= 1 else f"{value:+.2g} %"


def counters_summary(changes: Sequence[CounterChangeOut]) -> str:
    """One line (module doc): each counter that moved (DRAM read and written together), then the
    instructions when they did not; "counters unchanged" when nothing moved."""
    by_name = {c.counter: c for c in changes if c.base is not None and c.head is not None}
    parts = []
    for name in COUNTERS:
        c = by_name.get(name)
        if c is None or not c.moved or name == DRAM[1] and DRAM[0] in by_name and by_name[DRAM[0]].moved:
            continue
        if name in DRAM:
            sides = [by_name[n] for n in DRAM if n in by_name]
            b, h = sum(s.base or 0.0 for s in sides), sum(s.head or 0.0 for s in sides)
            parts.append(f"DRAM bytes {_percent(h / b - 1.0) if b else f'{b:g} -> {h:g}'}")
        elif COUNTERS[name].percent:
            parts.append(f"{COUNTERS[name].label} {c.base:.1f} % -> {c.head:.1f} %")
        else:
            parts.append(f"{COUNTERS[name].label} {_percent(c.change) if c.change is not None else f'{c.base:g} -> {c.head:g}'}")
    if not parts:
        return "counters unchanged" if by_name else "no counters on both sides"
    instructions = by_name.get("instructions")
    if instructions is not None and not instructions.moved:
        parts.append("instructions +0 %")
    return ", ".join(parts)


def result_counters(session: Session, refs: Sequence[tuple[int, bool]]) -> dict[tuple[int, bool], dict[str, float]]:
    """(case result id, base?) -> counter -> value, for those results (their own counters, or their paired
    base's); results without counters left out."""
    ids = sorted({r for r, _ in refs})
    out: dict[tuple[int, bool], dict[str, float]] = {}
    if not ids:
        return out
    rows = session.execute(
        sa.select(CounterValue.case_result_id, CounterValue.base, Series.metric, CounterValue.value)
        .join(Series, CounterValue.series_id == Series.id).where(CounterValue.case_result_id.in_(ids)))
    for result_id, base, metric, value in rows:
        out.setdefault((result_id, bool(base)), {})[metric] = value
    return out


def row_counters(session: Session, sides: Mapping[str, tuple[int, tuple[int, bool] | None]]) -> dict[str, CountersOut]:
    """Row key -> its counters, for rows given as (head result id, (base result id, paired base?) or None)."""
    refs = [(head, False) for head, _ in sides.values()] + [b for _, b in sides.values() if b is not None]
    values = result_counters(session, refs)
    missing = [head for head, _ in sides.values() if (head, False) not in values]
    notes: dict[int, str] = {}
    if missing:
        for result_id, environment in session.execute(
                sa.select(CaseResultRow.id, CaseResultRow.environment).where(CaseResultRow.id.in_(missing))):
            note = (environment or {}).get(COUNTERS_KEY)
            if note:
                notes[result_id] = note
    out = {}
    for key, (head, base) in sides.items():
        head_values = values.get((head, False))
        base_values = values.get(base) if base is not None else None
        if head_values is None:
            out[key] = CountersOut(changes=counter_changes(base_values, None),
                                   summary=f"no counters: {notes.get(head, 'the agent reported none')}")
            continue
        changes = counter_changes(base_values, head_values)
        out[key] = CountersOut(changes=changes, summary=counters_summary(changes) if base_values is not None
                               else "no base counters")
    return out
