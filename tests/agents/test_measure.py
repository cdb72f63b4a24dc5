from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from pipeline.agents.measure import (
    Reading,
    for_device,
    measure,
    measure_pairs,
    pair_order,
    per_round,
    rel_stdev,
    sample,
)
from pipeline.config import GPU_MEASUREMENT, MeasurementSettings


class FakeKernel:
    """A run_once that returns the next duration and advances a fake clock by it."""

    def __init__(self, durations: Callable[[int], float]):
        self.durations = durations
        self.now = 0.0
        self.calls = 0

    def clock(self) -> float:
        return self.now

    def __call__(self) -> float:
        value = self.durations(self.calls)
        self.calls += 1
        self.now += value
        return value


def settings(**overrides: float) -> MeasurementSettings:
    values: dict[str, float] = dict(warmup_s=0.0, min_samples=10, min_time_s=0.3, max_time_s=3.0)
    return MeasurementSettings(**{**values, **overrides})


def test_steady_kernel_stops_at_min_samples_once_min_time_is_reached() -> None:
    kernel = FakeKernel(lambda i: 0.1)
    assert sample(kernel, settings(), clock=kernel.clock) == [0.1] * 10


def test_fast_kernel_samples_until_min_time() -> None:
    kernel = FakeKernel(lambda i: 0.01)
    samples = sample(kernel, settings(), clock=kernel.clock)
    assert len(samples) == 30  # 30 * 0.01 s reaches min_time_s = 0.3 s


def test_a_noisy_kernel_stops_at_the_minimums_too() -> None:
    """No noise target ends a round: samples inside one are correlated, the rounds are judged."""
    kernel = FakeKernel(lambda i: 0.03 if i % 2 == 0 else 0.01)
    samples = sample(kernel, settings(), clock=kernel.clock)
    assert len(samples) == 15   # 8 x 0.03 + 7 x 0.01 s reaches min_time_s = 0.3 s


def test_nvbench_noise_criterion_samples_until_quiet_or_max_time() -> None:
    """`max_rel_stdev` (NVBench's criterion, for the comparison bench): the minimums, and the samples'
    relative standard deviation at most that; a kernel noisier than it runs to max_time_s."""
    def alternating(i: int) -> float:
        return 0.0100 if i % 2 == 0 else 0.0101   # relative stdev ~ 0.5 %
    kernel = FakeKernel(alternating)
    quiet = measure(lambda: Reading(kernel()), settings(min_time_s=0.0), clock=kernel.clock, max_rel_stdev=0.01)
    assert len(quiet.readings) == 10
    kernel = FakeKernel(alternating)
    noisy = measure(lambda: Reading(kernel()), settings(min_time_s=0.0, max_time_s=1.0), clock=kernel.clock,
                    max_rel_stdev=0.001)
    assert sum(noisy.samples) == pytest.approx(1.0, abs=0.011) and len(noisy.readings) == kernel.calls == 100
    assert rel_stdev(noisy.samples) > 0.001


def test_warmup_calls_are_not_samples() -> None:
    kernel = FakeKernel(lambda i: 1.0 if i < 5 else 0.1)     # five slow warm-up calls
    samples = sample(kernel, settings(warmup_s=4.5), clock=kernel.clock)
    assert samples == [0.1] * 10 and kernel.calls == 15


# ---- throttling (NVBench: a sample under 75% of the default SM clock is discarded, with a pause) ----

def _readings(clocks: list[float], seconds: float = 0.1) -> Callable[[], Reading]:
    calls = iter(range(len(clocks)))
    return lambda: Reading(seconds, clocks[next(calls)], 40.0)


def test_throttled_samples_are_discarded_and_counted_with_growing_pauses() -> None:
    now = [0.0]
    pauses: list[float] = []
    clocks = [1980.0] * 3 + [1000.0] * 5 + [1980.0] * 7      # five samples under 0.75 x 1980
    read = _readings(clocks)

    def timed() -> Reading:
        now[0] += 0.1
        return read()

    measured = measure(timed, settings(min_time_s=0.0), default_clock_mhz=1980.0, clock=lambda: now[0],
                       sleep=pauses.append)
    assert measured.throttled == 5 and len(measured.readings) == 10
    assert all(r.sm_clock_mhz == 1980.0 and r.temperature_c == 40.0 for r in measured.readings)
    # 0.05 s each, growing by min(1.5 x pause, 0.5 s) once more than two in a row were throttled
    assert pauses == pytest.approx([0.05, 0.05, 0.05, 0.125, 0.3125])


def test_preempted_samples_are_kept_and_counted() -> None:
    from pipeline.agents.measure import OFF_CPU_SLACK_S, preempted

    # 1 ms samples: 25 us off the CPU is an interrupt's worth under the slack (20 us + 1 %: 30 us), 1 ms a time slice
    off = [0.0, 25e-6, 1e-3, 0.0, 2e-3, 0.0, None, 0.0, 0.0, 0.0]
    feed = iter(Reading(1e-3, off_cpu_s=o) for o in off)
    measured = measure(lambda: next(feed), settings(min_time_s=0.0, min_samples=10),
                       clock=lambda: 0.0)
    assert measured.preempted == 2 and len(measured.readings) == 10 and measured.throttled == 0
    assert not preempted(Reading(1.0, off_cpu_s=None)) and not preempted(Reading(1e-3, off_cpu_s=25e-6))
    assert preempted(Reading(1e-3, off_cpu_s=OFF_CPU_SLACK_S + 1e-5 + 1e-9))

    base_feed = iter(Reading(1e-3, off_cpu_s=o) for o in [0.0, 5e-3, 0.0, 0.0])
    head_feed = iter(Reading(1e-3, off_cpu_s=o) for o in [0.0, 0.0, 0.0, 5e-3])
    base, head = measure_pairs(lambda: next(base_feed), lambda: next(head_feed),
                               settings(min_time_s=0.0, min_samples=4), clock=lambda: 0.0)
    assert (base.preempted, head.preempted) == (1, 1) and len(base.readings) == len(head.readings) == 4


def test_without_a_default_clock_nothing_is_discarded() -> None:
    measured = measure(_readings([100.0] * 10), settings(min_time_s=0.0), clock=lambda: 0.0)
    assert measured.throttled == 0 and len(measured.readings) == 10


def test_rel_stdev_is_nvbench_noise() -> None:
    assert rel_stdev([1.0, 3.0]) == pytest.approx(math.sqrt(2) / 2)
    assert rel_stdev([1.0]) == math.inf


# ---- pairs -----------------------------------------------------------------------------------------

def test_pairs_alternate_abba_and_stop_at_the_minimums() -> None:
    calls: list[str] = []
    now = [0.0]

    def side(name: str, seconds: Callable[[], float]) -> Callable[[], Reading]:
        def read() -> Reading:
            calls.append(name)
            value = seconds()
            now[0] += value
            return Reading(value)
        return read

    # both sides drift by 30% over the run; the ratio stays exactly 1.1
    drift = lambda: 1.0 + 0.3 * now[0] / 3.0    # noqa: E731
    base, head = measure_pairs(side("b", lambda: 0.01 * drift()), side("h", lambda: 0.011 * drift()),
                               settings(min_time_s=0.0), clock=lambda: now[0])
    assert calls[:8] == ["b", "h", "h", "b", "b", "h", "h", "b"]
    assert len(base.readings) == len(head.readings) == 10      # min_samples pairs
    ratios = [h / b for b, h in zip(base.samples, head.samples)]
    assert all(r == pytest.approx(1.1, rel=0.01) for r in ratios)


def test_pairs_continue_the_pattern_across_rounds() -> None:
    assert [pair_order(i) for i in range(4)] == [(0, 1), (1, 0), (0, 1), (1, 0)]


def test_device_overrides_by_kind_then_name() -> None:
    base = MeasurementSettings(device_overrides={"gpu": {"min_time_s": 0.5, "rounds": 3},
                                                 "nvidia-h100-sxm": {"rounds": 7}})
    assert for_device(base, "pixel-8-pro-cpu-big", "phone") == base
    gpu = for_device(base, "nvidia-h200", "gpu")
    assert (gpu.min_time_s, gpu.rounds) == (0.5, 3)
    h100 = for_device(base, "nvidia-h100-sxm", "gpu")
    assert (h100.min_time_s, h100.rounds) == (0.5, 7)
    with pytest.raises(ValueError, match="unknown measurement settings"):
        MeasurementSettings(device_overrides={"gpu": {"min_tim_s": 1}})
    with pytest.raises(ValueError, match=r"device_overrides\['gpu'\] sets max_rel_noise, removed: it had no effect"):
        MeasurementSettings(device_overrides={"gpu": {"max_rel_noise": 0.005}})
    assert for_device(MeasurementSettings(), "x", "gpu").min_time_s == GPU_MEASUREMENT["min_time_s"]


def test_a_round_gets_its_share_of_the_minimums() -> None:
    """The first `min_rounds` rounds share the time and sample minimums and the sample cap; each round
    at least 2 samples."""
    whole = MeasurementSettings(min_samples=10, min_time_s=0.3, max_time_s=3.0, max_samples=1500, min_rounds=3)
    one = per_round(whole)
    assert (one.min_samples, one.max_samples) == (4, 500)
    assert (one.min_time_s, one.max_time_s) == pytest.approx((0.1, 1.0))
    assert (one.warmup_s, one.rounds, one.min_rounds) == (whole.warmup_s, whole.rounds, whole.min_rounds)
    assert per_round(whole.model_copy(update={"rounds": 1, "min_samples": 3, "max_samples": 0})).min_samples == 3
    assert per_round(whole.model_copy(update={"min_samples": 2, "max_samples": 0})).max_samples == 0
    assert per_round(whole.model_copy(update={"min_samples": 2})).min_samples == 2
