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

Along history (`counter_history`: the series page beside the latency graph, and the API), a case's
counters on a device class are read commit by commit in the order of history (`history.history_order`),
and each commit whose counter differs from the previous commit with that counter by more than the
counter's tolerance is a step: deterministic figures, so every step is a change of the code path or
of its memory traffic, never noise, and needs no change-point detection. A commit without counters
says why, as a row does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from statistics import median

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from pipeline.contracts.counters import COUNTERS, COUNTERS_KEY, Counter
from pipeline.contracts.metrics import LATENCY
from pipeline.contracts.ids import CaseId, CaseIdAsText
from pipeline.results.store.history import history_order
from pipeline.results.store.models import Case, CaseResultRow, Commit, CounterValue, DeviceClassRow, Measurement, Series

__all__ = ["NO_NOTE", "TOLERANCES", "CounterChangeOut", "CounterHistoryOut", "CounterPointOut", "CounterStepOut", "CountersOut",
           "counter_changes", "counter_history", "counters_summary", "result_counters", "row_counters"]

NO_NOTE = "the agent reported none"
"""Why a result has no counters when its environment says nothing of them (an agent from before
counters, a result imported from another tool's file)."""

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
                                   summary=f"no counters: {notes.get(head, NO_NOTE)}")
            continue
        changes = counter_changes(base_values, head_values)
        out[key] = CountersOut(changes=changes, summary=counters_summary(changes) if base_values is not None
                               else "no base counters")
    return out


def _tolerance(counter: Counter) -> str:
    if not counter.tolerance and not counter.relative_tolerance:
        return f"{counter.label}: any difference"
    sides = ([f"{counter.relative_tolerance * 100:g} % of the previous value"] if counter.relative_tolerance else []) \
        + ([f"{counter.tolerance:g} {'points' if counter.percent else counter.unit}"] if counter.tolerance else [])
    return f"{counter.label}: more than {' or '.join(sides)}"


TOLERANCES = "; ".join(_tolerance(c) for c in COUNTERS.values())
"""What makes a step of each counter (`Counter.tolerance`), as the series page and the API say it."""

SUMMARY_STEPS = 3
"""A history's summary names this many steps, and counts the rest."""


class CounterPointOut(BaseModel):
    """A commit's hardware counters in a case's history on one device class (`counter_history`)."""

    model_config = ConfigDict(frozen=True)

    sha: str
    committed_at: datetime
    values: dict[str, float] = Field(
        description="counter -> its value at the commit, the median of its readings (instructions: readings of one "
                    "binary agree); empty when none was read")
    readings: int = Field(description="readings of the commit's binary: its results' counters, and those of paired "
                                      "jobs that timed it as their base")
    profiler: str | None = Field(description="what read them, e.g. 'ncu 2025.3.1.0'; None when nothing did")
    note: str | None = Field(description="why the commit has no counters, as its results say (off, profiler missing, "
                                         "refused, failed, not available on this device); None when it has some")


class CounterStepOut(BaseModel):
    """A counter that moved beyond its tolerance between two commits of a history (`counter_history`)."""

    model_config = ConfigDict(frozen=True)

    counter: str
    before_sha: str = Field(description="the previous commit of the history with that counter")
    after_sha: str = Field(description="the first commit with the new value")
    before: float
    after: float
    change: float | None = Field(description="after / before - 1; None when before is 0")


class CounterHistoryOut(BaseModel):
    """A case's hardware counters on one device class along history (module doc), beside its latency series."""

    model_config = ConfigDict(frozen=True)

    case_id: CaseIdAsText
    device_class: str
    units: dict[str, str] = Field(description="counter -> unit, for each counter read at some commit of the "
                                              "history, in the order they are shown")
    history: list[CounterPointOut] = Field(
        description="every commit of the history with an ok result or counters of the case on the class, oldest "
                    "first (the latency series' order: ancestry along the default branch)")
    steps: list[CounterStepOut] = Field(
        description="each commit whose counter differs from the previous commit with that counter by more than the "
                    f"counter's tolerance ({TOLERANCES}), oldest first: deterministic figures, so every step is a "
                    "change")
    summary: str = Field(description='one line: "counters at 12 of 40 commits (ncu 2025.3.1.0), 1 step: instructions '
                                     'at 0a1b2c3d4e"; or why there are none')


def _notes(environments: Sequence[Mapping[str, object] | None]) -> str:
    """What a commit's results say of their counters, each distinct note once."""
    return "; ".join(dict.fromkeys(str((e or {}).get(COUNTERS_KEY) or NO_NOTE) for e in environments))


def counter_history(session: Session, *, case_id: CaseId | str, device_class: str) -> CounterHistoryOut | None:
    """The case's counters on the device class along history (module doc); None when the store has no
    series of that case on that class (an unknown case or class, or one never measured there)."""
    found = session.execute(
        sa.select(Case.id, Case.case_id, DeviceClassRow.id).join(Series, Series.case_id == Case.id)
        .join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id)
        .where(Case.case_id == case_id, DeviceClassRow.name == device_class).limit(1)).one_or_none()
    if found is None:
        return None
    case_pk, case, class_pk = found
    readings: dict[int, dict[tuple[int, bool], tuple[dict[str, float], str]]] = {}
    for commit_id, result_id, base, metric, value, profiler in session.execute(
            sa.select(CounterValue.commit_id, CounterValue.case_result_id, CounterValue.base, Series.metric,
                      CounterValue.value, CounterValue.profiler)
            .join(Series, CounterValue.series_id == Series.id)
            .where(Series.case_id == case_pk, Series.device_class_id == class_pk)):
        reading = readings.setdefault(commit_id, {}).setdefault((result_id, bool(base)), ({}, profiler))
        reading[0][metric] = value
    environments: dict[int, list[dict[str, str] | None]] = {}
    for commit_id, environment in session.execute(   # the ok results: those of the latency series, by its index
            sa.select(Measurement.commit_id, CaseResultRow.environment)
            .join(CaseResultRow, Measurement.case_result_id == CaseResultRow.id)
            .join(Series, Measurement.series_id == Series.id)
            .where(Series.case_id == case_pk, Series.device_class_id == class_pk, Series.metric == LATENCY)
            .order_by(Measurement.id)):
        environments.setdefault(commit_id, []).append(environment)
    order = history_order(session, readings.keys() | environments.keys())
    commits = {c.id: c for c in session.execute(
        sa.select(Commit.id, Commit.sha, Commit.committed_at).where(Commit.id.in_(order)))} if order else {}
    history = []
    for commit_id in order:
        read = list(readings.get(commit_id, {}).values())
        values = {name: median(r[0][name] for r in read if name in r[0]) for name in COUNTERS
                  if any(name in r[0] for r in read)}
        history.append(CounterPointOut(
            sha=commits[commit_id].sha, committed_at=commits[commit_id].committed_at, values=values,
            readings=len(read), profiler=", ".join(dict.fromkeys(r[1] for r in read)) or None,
            note=None if values else _notes(environments.get(commit_id, []))))
    steps = _steps(history)
    return CounterHistoryOut(
        case_id=case, device_class=device_class,
        units={name: c.unit for name, c in COUNTERS.items() if any(name in p.values for p in history)},
        history=history, steps=steps, summary=_history_summary(history, steps))


def _steps(history: Sequence[CounterPointOut]) -> list[CounterStepOut]:
    """Each counter's value at each commit that moved (`_moved`: beyond its tolerance) against the previous
    commit with that counter, in history order; a commit without it is skipped, not a step."""
    steps = []
    previous: dict[str, tuple[str, float]] = {}
    for point in history:
        for name, value in point.values.items():
            if name in previous and _moved(name, previous[name][1], value):
                before_sha, before = previous[name]
                steps.append(CounterStepOut(counter=name, before_sha=before_sha, after_sha=point.sha, before=before,
                                            after=value, change=value / before - 1.0 if before else None))
            previous[name] = (point.sha, value)
    return steps


def _history_summary(history: Sequence[CounterPointOut], steps: Sequence[CounterStepOut]) -> str:
    """One line (`CounterHistoryOut.summary`)."""
    if not history:
        return "no results of this case on this device class yet"
    measured = [p for p in history if p.values]
    without = [p for p in history if not p.values]
    why = "; ".join(dict.fromkeys(p.note or NO_NOTE for p in without))
    if not measured:
        return f"no counters at any of {len(history)} commits: {why}"
    profilers = ", ".join(dict.fromkeys(p.profiler or "" for p in measured))
    moved = ", ".join(f"{COUNTERS[s.counter].label} at {s.after_sha[:10]}" for s in steps[:SUMMARY_STEPS])
    more = f" and {len(steps) - SUMMARY_STEPS} more" if len(steps) > SUMMARY_STEPS else ""
    line = (f"counters at {len(measured)} of {len(history)} commits ({profilers}), "
            f"{len(steps)} step{'s' if len(steps) != 1 else ''}{': ' + moved + more if steps else ''}")
    return line + (f"; none at {len(without)}: {why}" if without else "")
