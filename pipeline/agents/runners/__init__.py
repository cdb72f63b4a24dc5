"""Runners: load and check one bundle entry on one runtime (IREE, the CUDA driver API, PyTorch for
vendor controls).

Each runner's `prepare_entry` returns either the case's final result (wrong) or a `CheckedKernel`
that the agent then times; timing policy (rounds, stopping, throttling) lives in the agent, not here.

Every runner takes the same keyword arguments beside the entry:
- `placements`: how many copies of the case's buffers (inputs and outputs, the same values in each)
  to hold, at least one; the agent plans them for the whole job (`pipeline.agents.placement`).
  Placement moves latency by several percent on memory-bound shapes (docs/design.md, "Measurement"), so
  the agent times each round on the next copy and a run's level averages several placements;
- `workspace`: another kernel's `Workspace` to time on instead of making one (a paired base times
  on its head's buffers: same data, same addresses, so the two slots of a pair are equal);
- `verified`: a correctness outcome already known for this binary, reference and input policy on
  this device class (the agent's check cache, or the head when the base is the same binary): the
  check is skipped and this outcome reported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipeline.agents.measure import Reading
from pipeline.contracts import BundleEntry, Correctness


def _nothing() -> None:
    return None


@dataclass
class Workspace:
    """The buffer copies a case is timed on, and which one the next call uses.

    `sets[i]` is the runner's own handle for copy i (device pointers, device arrays, tensors);
    `current` selects the copy for the kernels sharing this workspace (head and paired base);
    `memo` keeps what the first check computed (the reference's expected outputs) for the next
    kernel checked on the same inputs; `release` frees the copies (the creator's duty)."""

    sets: list[Any]
    current: int = 0
    memo: dict[str, Any] = field(default_factory=dict)
    release: Callable[[], None] = _nothing

    def select(self, placement: int) -> None:
        self.current = placement % len(self.sets)


@dataclass
class CheckedKernel:
    """A kernel that passed its correctness check, ready to be timed.

    `run_once` returns one sample in seconds; a runner that can read the SM clock and the temperature
    appends one reading of each per call to `clocks_mhz` and `temperatures_c` (warm-up calls included);
    `default_clock_mhz` is the SM clock the device runs at unthrottled (NVML's default application clock,
    else its maximum), under which samples count as throttled; `release` frees what the kernel holds;
    `environment` is what the case's result records beside the input seed (e.g. a vendor backend)."""

    entry: BundleEntry
    correctness: Correctness
    run_once: Callable[[], float]
    clocks_mhz: list[float | None] = field(default_factory=list)
    temperatures_c: list[float | None] = field(default_factory=list)
    off_cpu_s: list[float] = field(default_factory=list)
    """a runner whose calls run on the timing thread appends, per call, the time that thread was off the CPU"""
    default_clock_mhz: float | None = None
    release: Callable[[], None] = _nothing
    environment: dict[str, str] = field(default_factory=dict)
    workspace: Workspace | None = None
    """the buffers this kernel is timed on (None: the runner keeps its own single copy)"""

    @property
    def placements(self) -> int:
        return len(self.workspace.sets) if self.workspace is not None else 1

    def select(self, placement: int) -> None:
        """Time the next calls on buffer copy `placement` (modulo the copies held)."""
        if self.workspace is not None:
            self.workspace.select(placement)

    def read(self) -> Reading:
        """One call of `run_once`, with the clock and temperature it appended (None where it appended none)."""
        clocks, temps, off = len(self.clocks_mhz), len(self.temperatures_c), len(self.off_cpu_s)
        seconds = self.run_once()
        clock = self.clocks_mhz[-1] if len(self.clocks_mhz) > clocks else None
        temperature = self.temperatures_c[-1] if len(self.temperatures_c) > temps else None
        return Reading(seconds, clock, temperature, self.off_cpu_s[-1] if len(self.off_cpu_s) > off else None)
