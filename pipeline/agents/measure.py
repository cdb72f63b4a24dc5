"""The sampling loop: warm up, then time until the median is known well enough, or time runs out.

Pure: it calls `run_once` (which returns one sample, in seconds) and reads `clock`; both are
parameters, so the loop is tested with deterministic fakes.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence

from pipeline.config import MeasurementSettings

__all__ = ["sample", "median_rel_stderr", "MEDIAN_STDERR_FACTOR"]

MEDIAN_STDERR_FACTOR = math.sqrt(math.pi / 2)
"""Standard error of the median = sqrt(pi/2) * stdev / sqrt(n) for normal samples (1.2533)."""


def median_rel_stderr(samples: Sequence[float]) -> float:
    """Relative standard error of the median: sqrt(pi/2) * stdev / (sqrt(n) * median).

    Assumes independent, roughly normal samples; for skewed latencies it is an approximation that
    errs on the cautious side (the stdev grows with the tail). Infinite for fewer than 2 samples.
    """
    n = len(samples)
    if n < 2:
        return math.inf
    median = statistics.median(samples)
    if median <= 0:
        return math.inf
    return MEDIAN_STDERR_FACTOR * statistics.stdev(samples) / (math.sqrt(n) * median)


def sample(
    run_once: Callable[[], float],
    settings: MeasurementSettings,
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Every sample taken, in seconds.

    1. Warm-up: call `run_once` (results discarded) until `settings.warmup_s` of wall time passed.
    2. Sample until n >= min_samples AND the samples' sum >= min_time_s AND the relative standard
       error of the median (`median_rel_stderr`) <= max_rel_noise; or until the sampling phase's
       wall time reaches max_time_s (at least one sample is always taken).
    """
    start = clock()
    while clock() - start < settings.warmup_s:
        run_once()
    samples: list[float] = []
    total = 0.0
    start = clock()
    while True:
        value = run_once()
        samples.append(value)
        total += value
        if (
            len(samples) >= settings.min_samples
            and total >= settings.min_time_s
            and median_rel_stderr(samples) <= settings.max_rel_noise
        ):
            return samples
        if clock() - start >= settings.max_time_s:
            return samples
