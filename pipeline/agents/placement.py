"""How many buffer copies each case of a job is timed on (docs/design.md, "Measurement": placement).

Placement moves latency by 0.2-2 % on memory-bound shapes, so round r is timed on copy r mod n and
a run's level averages n placements. A case with one copy carries that copy's offset into the run
as if it were the code's, and fresh series see it as run-to-run noise their thresholds do not know
(unpaired GPU A/A, 2026-11-25: the 32 cases over the per-case budget carried 36 of the 74 p-values
under 0.05). The job holds every timed case's copies at once (round-robin), so the copies are planned
for the job as a whole: each case within `placement_bytes`, and, with `placement_total_bytes`, the
cases that budget left on fewer copies raised evenly (every one to two before any to three) while
the job's total stays within it; a total over it is brought down from the largest sets, never under
one copy each. Where the runner can tell the device memory free at the job's start, the total is
also kept within `placement_memory_fraction` of it (`job_budget`).

Where one copy of every case is over that budget (the CUDA suite's 16.4 GiB on a 24 GiB GPU), the job
is timed in groups (`timing_groups`): consecutive cases whose single copies fit, each group checked,
timed round-robin and released before the next; the copies are then planned per group. The budget
counts the declared buffers only: the checks' references and the vendor controls' graph pools come on
top (an H100 at 6 GiB a group peaked 2-10 GiB over it), which the share of free memory must absorb.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.config import MeasurementSettings

__all__ = ["job_budget", "plan_placements", "timing_groups"]


def job_budget(settings: MeasurementSettings, free_bytes: int | None = None) -> int | None:
    """Bytes all of a job's copies may take: `placement_total_bytes`, within `placement_memory_fraction`
    of `free_bytes` (the device's free memory) when known. None: no job budget (per case only)."""
    budget = settings.placement_total_bytes
    if budget is None or free_bytes is None:
        return budget
    return min(budget, int(settings.placement_memory_fraction * free_bytes))


def plan_placements(set_bytes: Sequence[int], settings: MeasurementSettings, *,
                    free_bytes: int | None = None) -> list[int]:
    """Copies per case, in the order of `set_bytes` (each case's buffers, inputs and outputs, in bytes),
    on a device with `free_bytes` of memory free (None: unknown)."""
    wanted = settings.placements
    counts = [max(1, min(wanted, settings.placement_bytes // max(size, 1))) for size in set_bytes]
    budget = job_budget(settings, free_bytes)
    if budget is None:
        return counts
    total = sum(c * s for c, s in zip(counts, set_bytes))
    by_size = sorted(range(len(set_bytes)), key=lambda i: (set_bytes[i], i))
    for largest in reversed(by_size):          # over the total: the largest sets give copies back first
        while total > budget and counts[largest] > 1:
            counts[largest] -= 1
            total -= set_bytes[largest]
    for level in range(2, wanted + 1):         # then fill evenly, the smallest sets first at each level
        for i in by_size:
            if counts[i] == level - 1 and total + set_bytes[i] <= budget:
                counts[i] = level
                total += set_bytes[i]
    return counts


def timing_groups(set_bytes: Sequence[int], budget: int | None) -> list[list[int]]:
    """Positions in `set_bytes` of the cases held and timed together, in order: consecutive cases whose
    one copy each fits `budget`, a case over it on its own. No budget, or all fit: one group."""
    groups: list[list[int]] = []
    total = 0
    for i, size in enumerate(set_bytes):
        if not groups or (budget is not None and total + size > budget):
            groups.append([])
            total = 0
        groups[-1].append(i)
        total += size
    return groups
