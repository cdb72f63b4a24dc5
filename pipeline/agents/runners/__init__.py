"""Runners: load and check one bundle entry on one runtime (IREE, the CUDA driver API, PyTorch for
vendor controls).

Each runner's `prepare_entry` returns either the case's final result (wrong) or a `CheckedKernel`
that the agent then times; timing policy (rounds, stopping) lives in the agent, not here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.contracts import BundleEntry, Correctness


def _nothing() -> None:
    return None


@dataclass
class CheckedKernel:
    """A kernel that passed its correctness check, ready to be timed.

    `run_once` returns one sample in seconds; a runner that can read the SM clock appends one reading
    per call to `clocks_mhz` (warm-up calls included); `release` frees what the kernel holds;
    `environment` is what the case's result records beside the input seed (e.g. a vendor backend)."""

    entry: BundleEntry
    correctness: Correctness
    run_once: Callable[[], float]
    clocks_mhz: list[float | None] = field(default_factory=list)
    release: Callable[[], None] = _nothing
    environment: dict[str, str] = field(default_factory=dict)
