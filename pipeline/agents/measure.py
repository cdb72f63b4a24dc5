"""The sampling loop (after NVBench's cold measurement): warm up, then time until the round's share
of the time and sample minimums is reached, or its share of the time limit runs out; samples taken while
the GPU was throttled are discarded, with a pause. Samples whose timing thread was taken off the CPU
mid-call (`preempted`) are counted: a CPU runner whose call runs on that thread times its CPU time, which
leaves another process's time slice out (`pipeline.agents.runners.iree_runner`). No noise target ends a
round: samples inside one are correlated, so the rounds are judged (docs/design.md, "Measurement").

Also the settings a job is timed with: its device class's (`for_device`) and one round's (`per_round`).

Pure: it calls `read_once` (one sample, with the SM clock and temperature read beside it), `clock`
and `sleep`; all are parameters, so the loop is tested with deterministic fakes.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pipeline.config import MeasurementSettings

__all__ = ["Reading", "Measured", "measure", "measure_pairs", "sample", "pair_order", "rel_stdev", "for_device",
           "per_round", "MAX_BACKOFF_STEP_S", "OFF_CPU_SLACK_S", "OFF_CPU_SHARE", "preempted"]

MAX_BACKOFF_STEP_S = 0.5
"""NVBench: after more than 2 throttled samples in a row the pause grows by min(1.5 x pause, 0.5 s)."""


@dataclass(frozen=True)
class Reading:
    """One timed call: seconds, and the SM clock (MHz) and temperature (Celsius) read right after it
    (None where the runner cannot read them)."""

    seconds: float
    sm_clock_mhz: float | None = None
    temperature_c: float | None = None
    off_cpu_s: float | None = None
    """wall time minus the timing thread's CPU time over the call, where the call runs on that thread
    (IREE's local-sync driver): time the thread spent descheduled, left out of `seconds`; None where it
    cannot be told"""


OFF_CPU_SLACK_S = 20e-6
OFF_CPU_SHARE = 0.01
"""A sample is `preempted` when its thread was off the CPU for more than OFF_CPU_SLACK_S plus this share of
the sample: two clock reads and an interrupt cost a few microseconds, another process's time slice
(CFS: 0.75 ms and up) much more."""


def preempted(reading: Reading) -> bool:
    """Whether the sample's thread was descheduled during it (`Reading.off_cpu_s`)."""
    return reading.off_cpu_s is not None and reading.off_cpu_s > OFF_CPU_SLACK_S + OFF_CPU_SHARE * reading.seconds


@dataclass
class Measured:
    """Every accepted sample in order, how many were discarded as throttled, and how many accepted ones
    were `preempted` (their time leaves the preemption out)."""

    readings: list[Reading] = field(default_factory=list)
    throttled: int = 0
    preempted: int = 0

    @property
    def samples(self) -> list[float]:
        return [r.seconds for r in self.readings]


def rel_stdev(samples: Sequence[float]) -> float:
    """Relative standard deviation stdev / mean: NVBench's "Noise" column and stdev stopping criterion.
    Infinite below 2 samples."""
    if len(samples) < 2:
        return math.inf
    mean = statistics.fmean(samples)
    return statistics.stdev(samples) / mean if mean > 0 else math.inf


def for_device(settings: MeasurementSettings, name: str, kind: str) -> MeasurementSettings:
    """The settings with `device_overrides` of the device's kind, then of its class name, applied."""
    changes = {**settings.device_overrides.get(kind, {}), **settings.device_overrides.get(name, {})}
    if not changes:
        return settings
    return MeasurementSettings.model_validate({**settings.model_dump(), **changes})


def per_round(settings: MeasurementSettings) -> MeasurementSettings:
    """The budget of one round: time and sample minimums (and the sample cap) split evenly over the
    rounds every case gets (`min_rounds`); warm-up repeated each round."""
    rounds = min(settings.min_rounds, settings.rounds)
    return settings.model_copy(update={
        "min_samples": max(2, -(-settings.min_samples // rounds)),
        "max_samples": -(-settings.max_samples // rounds) if settings.max_samples else 0,
        "min_time_s": settings.min_time_s / rounds,
        "max_time_s": settings.max_time_s / rounds,
    })


def _throttled(reading: Reading, settings: MeasurementSettings, default_clock_mhz: float | None) -> bool:
    return (
        settings.throttle_threshold > 0 and default_clock_mhz is not None and reading.sm_clock_mhz is not None
        and reading.sm_clock_mhz < settings.throttle_threshold * default_clock_mhz
    )


def measure(
    read_once: Callable[[], Reading],
    settings: MeasurementSettings,
    *,
    default_clock_mhz: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    max_rel_stdev: float | None = None,
) -> Measured:
    """Warm up, then sample (module doc).

    1. Warm-up: call `read_once` (results discarded) until `settings.warmup_s` of wall time passed.
    2. Sample until n >= min_samples AND the samples' sum >= min_time_s (AND, with `max_rel_stdev`,
       their `rel_stdev` is at most that: NVBench's noise criterion, which bench/measurement_quality.py
       compares with; the agent leaves it off); or until n reaches `max_samples` (when set) or the
       sampling phase's wall time reaches max_time_s. A sample whose SM clock is under `throttle_threshold` x `default_clock_mhz` is
       discarded and followed by a pause of `throttle_backoff_s`, which grows after more than two
       such samples in a row (NVBench's rule); it is counted in `Measured.throttled`. With no
       default clock or no clock reading, nothing is discarded. `preempted` samples are kept and
       counted (`Measured.preempted`). Every accepted sample is kept; with every sample throttled until
       the timeout, none are.
    """
    start = clock()
    while clock() - start < settings.warmup_s:
        read_once()
    measured = Measured()
    total = 0.0
    backoff, in_a_row = settings.throttle_backoff_s, 0
    start = clock()
    while True:
        reading = read_once()
        if _throttled(reading, settings, default_clock_mhz):
            if in_a_row > 2:
                backoff += min(backoff * 1.5, MAX_BACKOFF_STEP_S)
            measured.throttled += 1
            in_a_row += 1
            if backoff > 0:
                sleep(backoff)
        else:
            backoff, in_a_row = settings.throttle_backoff_s, 0
            measured.readings.append(reading)
            measured.preempted += preempted(reading)
            total += reading.seconds
            samples = measured.samples
            if settings.max_samples and len(samples) >= max(settings.max_samples, settings.min_samples):
                return measured
            if (
                len(samples) >= settings.min_samples
                and total >= settings.min_time_s
                and (max_rel_stdev is None or rel_stdev(samples) <= max_rel_stdev)
            ):
                return measured
        if clock() - start >= settings.max_time_s:
            return measured


def pair_order(index: int) -> tuple[int, int]:
    """Which side runs first in pair `index` (0 = base, 1 = head): base-head, then head-base (calls
    A B B A A B ...), so a drift that is linear over two pairs cancels, and so does any edge the
    second call of a pair gets from the first (caches, clocks ramping)."""
    return (0, 1) if index % 2 == 0 else (1, 0)


def measure_pairs(
    read_base: Callable[[], Reading],
    read_head: Callable[[], Reading],
    settings: MeasurementSettings,
    *,
    first_pair: int = 0,
    default_clock_mhz: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[Measured, Measured]:
    """Base and head sampled back to back, pair by pair, in ABBA order (`pair_order`, counting from
    `first_pair` so that rounds continue the pattern): index i of the two results is one pair.

    Warm-up alternates the two for `warmup_s`. Stops when n >= min_samples pairs AND each side's
    samples sum to min_time_s; or at `max_samples` pairs (when set), or max_time_s. A pair with either
    sample throttled is discarded (both sides count it) with `measure`'s back-off.
    """
    readers = (read_base, read_head)
    start, turn = clock(), 0
    while clock() - start < settings.warmup_s:
        readers[turn % 2]()
        turn += 1
    base, head = Measured(), Measured()
    totals = [0.0, 0.0]
    backoff, in_a_row, index = settings.throttle_backoff_s, 0, first_pair
    start = clock()
    while True:
        pair: list[Reading] = [Reading(0.0), Reading(0.0)]
        for side in pair_order(index):
            pair[side] = readers[side]()
        index += 1
        if any(_throttled(r, settings, default_clock_mhz) for r in pair):
            if in_a_row > 2:
                backoff += min(backoff * 1.5, MAX_BACKOFF_STEP_S)
            base.throttled += 1
            head.throttled += 1
            in_a_row += 1
            if backoff > 0:
                sleep(backoff)
        else:
            backoff, in_a_row = settings.throttle_backoff_s, 0
            base.readings.append(pair[0])
            head.readings.append(pair[1])
            base.preempted += preempted(pair[0])
            head.preempted += preempted(pair[1])
            totals[0] += pair[0].seconds
            totals[1] += pair[1].seconds
            pairs = len(base.readings)
            if settings.max_samples and pairs >= max(settings.max_samples, settings.min_samples):
                return base, head
            if pairs >= settings.min_samples and min(totals) >= settings.min_time_s:
                return base, head
        if clock() - start >= settings.max_time_s:
            return base, head


def sample(
    run_once: Callable[[], float],
    settings: MeasurementSettings,
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """`measure` for a `run_once` that returns seconds alone (no clock, so nothing is discarded):
    every sample taken, in seconds (at least one)."""
    return measure(lambda: Reading(run_once()), settings, clock=clock).samples
