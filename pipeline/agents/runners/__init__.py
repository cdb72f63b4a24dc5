"""Runners: load and check one bundle entry on one runtime (IREE, the CUDA driver API, PyTorch for
vendor controls).

Each runner's `prepare_entry` returns either the case's final result (wrong) or a `CheckedKernel`
that the agent then times; timing policy (rounds, stopping, throttling) lives in the agent, not here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.agents.measure import Reading
from pipeline.contracts import BundleEntry, Correctness


def _nothing() -> None:
    return None


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
    default_clock_mhz: float | None = None
    release: Callable[[], None] = _nothing
    environment: dict[str, str] = field(default_factory=dict)

    def read(self) -> Reading:
        """One call of `run_once`, with the clock and temperature it appended (None where it appended none)."""
        clocks, temps = len(self.clocks_mhz), len(self.temperatures_c)
        seconds = self.run_once()
        clock = self.clocks_mhz[-1] if len(self.clocks_mhz) > clocks else None
        temperature = self.temperatures_c[-1] if len(self.temperatures_c) > temps else None
        return Reading(seconds, clock, temperature)
