"""Where in a commit range a level changed: the search of a bisection, as pure functions (`plan`: the
next probes or what was found; `combine`: one position's readings; `differs`: two levels apart).

Positions, the search, its confirmation and assumptions: docs/design.md, "Bisection".
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

__all__ = ["BASE", "Found", "Level", "Plan", "Unresolved", "combine", "differs", "plan", "smallest_jump", "verdict"]


@dataclass(frozen=True)
class Level:
    change: float
    """head / base - 1 of the affected case, timed paired with the base"""
    low: float
    high: float
    """the change's 95 % interval"""

    @property
    def half_width(self) -> float:
        return max(0.0, (self.high - self.low) / 2)


BASE = Level(0.0, 0.0, 0.0)
"""The base's level: every probe is measured against it."""


@dataclass(frozen=True)
class Found:
    position: int
    jump: float
    """the level's move at this commit (its level minus the level of the commit before it)"""


@dataclass(frozen=True)
class Unresolved:
    low: int
    """the last measured position before the move"""
    high: int
    """the first measured position after it: the culprit is one of `skipped` or this one"""
    skipped: tuple[int, ...]
    jump: float


@dataclass(frozen=True)
class Plan:
    probes: list[int] = field(default_factory=list)
    """positions to run now"""
    culprits: list[Found] = field(default_factory=list)
    unresolved: list[Unresolved] = field(default_factory=list)
    waiting: bool = False
    """a probe already queued lies inside a range that moved: its level decides what comes next"""

    @property
    def done(self) -> bool:
        return not self.probes and not self.waiting


def combine(readings: Sequence[Level]) -> Level:
    """One level of several jobs of one commit: their mean, with an interval that holds every
    reading's interval (the jobs disagreeing is noise the single intervals did not see)."""
    if not readings:
        raise ValueError("no readings to combine")
    if len(readings) == 1:
        return readings[0]
    return Level(sum(r.change for r in readings) / len(readings), min(r.low for r in readings),
                 max(r.high for r in readings))


def _log(change: float) -> float:
    """A change as the log of its ratio (head / base): slowdowns compose by multiplying."""
    return math.log1p(max(change, -0.999999))


def smallest_jump(floor: float, min_share: float, bad: Level | None) -> float:
    """The smallest move `differs` counts, as a log ratio: `floor` (a change: the case's paired
    threshold), and `min_share` of the bad commit's whole move once it is known."""
    return max(_log(floor), min_share * abs(_log(bad.change))) if bad is not None else _log(floor)


def differs(a: Level, b: Level, jump: float) -> bool:
    """The levels are apart: by at least `jump` (a log ratio: `smallest_jump`), and by more than the
    half-widths of their intervals combined (as for independent estimates: the square root of the sum
    of squares), both on the log of each ratio (docs/design.md, "Bisection": a device whose speed ratio
    drifts between jobs moves a level by a share of it)."""
    gap = abs(_log(b.change) - _log(a.change))
    widths = [(_log(level.high) - _log(level.low)) / 2 for level in (a, b)]
    return gap >= jump and gap > math.hypot(*widths)


def plan(n: int, levels: Mapping[int, Level], *, skipped: Collection[int] = (), pending: Collection[int] = (),
         min_jump: float, repeated: Collection[int] | None = None) -> Plan:
    """What to run next, and what is known so far (docs/design.md, "Bisection"). `levels`: measured positions (the
    base, 0, may be left out); `skipped`: positions that could not be built or run; `pending`:
    positions whose probe is queued or running; `repeated`: positions run twice already (None: a
    finding at several places is returned unconfirmed). The bad commit (n) is probed first, alone:
    until its paired level is known, nothing says the change is there to find."""
    if n < 1:
        raise ValueError(f"a range needs at least one commit after its base, got n={n}")
    if n not in levels:
        return Plan(probes=[] if n in pending or n in skipped else [n], waiting=n in pending)
    known = {0: BASE, **levels}
    order = sorted(known)
    probes: list[int] = []
    culprits: list[Found] = []
    unresolved: list[Unresolved] = []
    waiting = False
    for low, high in pairwise(order):
        a, b = known[low], known[high]
        if not differs(a, b, min_jump):
            continue
        jump = b.change - a.change
        inside = range(low + 1, high)
        if any(p in pending for p in inside):
            waiting = True
            continue
        if high - low == 1:
            culprits.append(Found(high, jump))
            continue
        free = [p for p in inside if p not in skipped]
        if not free:
            unresolved.append(Unresolved(low, high, tuple(inside), jump))
            continue
        probes.append(_nearest_middle(free, low, high))
    if not probes and not waiting:
        hidden, waiting = _hidden_moves(order, known, min_jump, skipped=skipped, pending=pending, repeated=repeated)
        if hidden or waiting:
            return Plan(probes=hidden, waiting=waiting and not hidden)
    if repeated is not None and not probes and not waiting and len(culprits) + len(unresolved) > 1:
        ends = {p for f in culprits for p in (max(q for q in order if q < f.position), f.position)}
        ends |= {p for u in unresolved for p in (u.low, u.high)}
        ends.discard(0)   # the base is every probe's own pair: its level is 0 by construction
        again = sorted(p for p in ends if p not in repeated and p not in pending)
        if again or any(p in pending for p in ends):
            return Plan(probes=again, waiting=not again)
    return Plan(probes=probes, culprits=culprits, unresolved=unresolved, waiting=waiting)


def _hidden_moves(order: Sequence[int], known: Mapping[int, Level], min_jump: float, *, skipped: Collection[int],
                  pending: Collection[int], repeated: Collection[int] | None) -> tuple[list[int], bool]:
    """Probes for moves a measured position hides (docs/design.md, "Bisection"): for each measured
    a < p < b, consecutive, with p alike both a and b while a and b are apart: p again (once, when
    `repeated` is given), else the free position nearest the middle of (a, b); and whether such a probe
    is already queued."""
    probes: set[int] = set()
    waiting = False
    for a, p, b in zip(order, order[1:], order[2:], strict=False):
        if (differs(known[a], known[p], min_jump) or differs(known[p], known[b], min_jump)
                or not differs(known[a], known[b], min_jump)):
            continue
        inside = range(a + 1, b)
        if any(q in pending for q in inside):
            waiting = True
        elif repeated is not None and p not in repeated:
            probes.add(p)
        elif free := [q for q in inside if q not in known and q not in skipped]:
            probes.add(_nearest_middle(free, a, b))
    return sorted(probes), waiting


def _nearest_middle(free: Sequence[int], low: int, high: int) -> int:
    """The position of `free` nearest the middle of (low, high), the earlier one on a tie: a binary search's next probe."""
    middle = (low + high) / 2
    return min(free, key=lambda p: (abs(p - middle), p))


def verdict(level: Level, bad: Level | None, min_jump: float) -> str:
    """A probe's level in words: "old level" (not apart from the base), "new level" (not apart from
    the bad commit), else "in between" (the change is spread over several commits)."""
    if not differs(BASE, level, min_jump):
        return "old level"
    if bad is None or not differs(level, bad, min_jump):
        return "new level"
    return "in between"
