"""Hardware counters of one kernel launch: what a profiler counted, beside the latency
(docs/design.md, "Measurement": deterministic counters).

An agent whose host has a profiler (Nsight Compute on NVIDIA, the kernel's perf events on CPUs)
launches each checked kernel once more, outside the timed rounds, on the check's inputs, without
changing clocks, and reports what the profiler counted (`HardwareCounters`). Instructions executed
and DRAM bytes do not depend on clocks, temperature or buffer placement: a difference between two
binaries is a difference in the code path, however noisy their timings are. Where no counters were
taken, the result's environment says why (`COUNTERS_KEY`), never nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["COUNTERS", "COUNTERS_KEY", "Counter", "CounterName", "HardwareCounters"]

CounterName = Literal["instructions", "dram_read_bytes", "dram_write_bytes", "l2_hit_rate", "achieved_occupancy"]


@dataclass(frozen=True)
class Counter:
    """One counter: its metric name (a series of its own: `pipeline.contracts.METRICS`), unit, how it
    is shown, and how far two readings of one binary may differ and be no change: `tolerance` (in the
    counter's unit) or `relative_tolerance` (a share of the base), whichever is larger (both 0: any
    difference is one)."""

    name: CounterName
    unit: str
    label: str
    lower_is_better: bool
    tolerance: float = 0.0
    relative_tolerance: float = 0.0
    percent: bool = False
    """a percentage: its change is shown in points (61.2 % -> 55.0 %), not relative"""


COUNTERS: dict[str, Counter] = {c.name: c for c in (
    Counter("instructions", "instr", "instructions", lower_is_better=True),
    # What one binary's launches on the same inputs measured in three jobs on an H200 (21 Triton GEMMs,
    # ncu 2025.3, BENCHMARKS.md issue 32): instructions identical in all 21; DRAM bytes identical in 1
    # (read) and 0 (written), apart by up to 0.42 % read and 0.73 % written (L2 replacement is not
    # deterministic); the L2 hit rate by up to 7.2 points; occupancy by up to 0.07 points.
    Counter("dram_read_bytes", "B", "DRAM bytes read", lower_is_better=True, relative_tolerance=0.01),
    Counter("dram_write_bytes", "B", "DRAM bytes written", lower_is_better=True, relative_tolerance=0.01),
    Counter("l2_hit_rate", "%", "L2 hit rate", lower_is_better=False, tolerance=8.0, percent=True),
    Counter("achieved_occupancy", "%", "achieved occupancy", lower_is_better=False, tolerance=0.5, percent=True),
)}
"""Every counter an agent may report, in the order they are shown."""

COUNTERS_KEY = "counters"
"""The result environment's key saying how its counters were taken, or why there are none."""

CounterValue = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class HardwareCounters(BaseModel):
    """What a profiler counted over one launch of the case's kernel on the check's inputs."""

    model_config = ConfigDict(extra="forbid")

    profiler: str = Field(min_length=1, max_length=200, description="the tool and its version, e.g. 'ncu 2025.3.1'")
    values: dict[CounterName, CounterValue] = Field(
        min_length=1, description="counter -> value over the launch (instructions: warp instructions on a GPU, "
        "user-space instructions on a CPU; bytes; percentages)")
