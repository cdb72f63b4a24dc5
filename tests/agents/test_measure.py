from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from pipeline.agents.measure import Reading, measure, measure_pairs, median_rel_stderr, noise, pair_order, rel_stdev, sample
from pipeline.config import MeasurementSettings


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
    values: dict[str, float] = dict(warmup_s=0.0, min_samples=10, min_time_s=0.3, max_time_s=3.0, max_rel_noise=0.01)
    return MeasurementSettings(**{**values, **overrides})


def test_steady_kernel_stops_at_min_samples_once_min_time_is_reached() -> None:
    kernel = FakeKernel(lambda i: 0.1)
    assert sample(kernel, settings(), clock=kernel.clock) == [0.1] * 10


def test_fast_kernel_samples_until_min_time() -> None:
    kernel = FakeKernel(lambda i: 0.01)
    samples = sample(kernel, settings(), clock=kernel.clock)
    assert len(samples) == 30  # 30 * 0.01 s reaches min_time_s = 0.3 s


def test_noisy_kernel_stops_at_max_time_and_keeps_every_sample() -> None:
    kernel = FakeKernel(lambda i: 0.01 if i % 2 else 0.03)   # relative stderr stays ~ 0.6 / sqrt(n)
    samples = sample(kernel, settings(max_time_s=1.0), clock=kernel.clock)
    assert sum(samples) == pytest.approx(1.0, abs=0.03)
    assert len(samples) == kernel.calls == 50


def test_noise_that_settles_stops_early() -> None:
    kernel = FakeKernel(lambda i: 0.05 if i < 3 else 0.01)
    samples = sample(kernel, settings(max_rel_noise=0.05), clock=kernel.clock)
    assert samples[:3] == [0.05] * 3
    assert median_rel_stderr(samples) <= 0.05 < median_rel_stderr(samples[:-1])


def test_warmup_calls_are_not_samples() -> None:
    kernel = FakeKernel(lambda i: 1.0 if i < 5 else 0.1)     # five slow warm-up calls
    samples = sample(kernel, settings(warmup_s=4.5), clock=kernel.clock)
    assert samples == [0.1] * 10 and kernel.calls == 15


def test_median_rel_stderr_known_values() -> None:
    assert median_rel_stderr([1.0]) == math.inf
    assert median_rel_stderr([2.0, 2.0, 2.0]) == 0.0
    # stdev of [1, 3] is sqrt(2); median 2; n 2 -> sqrt(pi/2) * sqrt(2) / (sqrt(2) * 2)
    assert median_rel_stderr([1.0, 3.0]) == pytest.approx(math.sqrt(math.pi / 2) / 2)




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
    measured = measure(lambda: next(feed), settings(min_time_s=0.0, min_samples=10, max_rel_noise=0.99),
                       clock=lambda: 0.0)
    assert measured.preempted == 2 and len(measured.readings) == 10 and measured.throttled == 0
    assert not preempted(Reading(1.0, off_cpu_s=None)) and not preempted(Reading(1e-3, off_cpu_s=25e-6))
    assert preempted(Reading(1e-3, off_cpu_s=OFF_CPU_SLACK_S + 1e-5 + 1e-9))

    base_feed = iter(Reading(1e-3, off_cpu_s=o) for o in [0.0, 5e-3, 0.0, 0.0])
    head_feed = iter(Reading(1e-3, off_cpu_s=o) for o in [0.0, 0.0, 0.0, 5e-3])
    base, head = measure_pairs(lambda: next(base_feed), lambda: next(head_feed),
                               settings(min_time_s=0.0, min_samples=4, max_rel_noise=0.99), clock=lambda: 0.0)
    assert (base.preempted, head.preempted) == (1, 1) and len(base.readings) == len(head.readings) == 4


def test_without_a_default_clock_nothing_is_discarded() -> None:
    measured = measure(_readings([100.0] * 10), settings(min_time_s=0.0, max_rel_noise=0.5), clock=lambda: 0.0)
    assert measured.throttled == 0 and len(measured.readings) == 10


def test_rel_stdev_is_nvbench_noise() -> None:
    assert rel_stdev([1.0, 3.0]) == pytest.approx(math.sqrt(2) / 2)
    assert noise([1.0, 3.0], "rel_stdev") == rel_stdev([1.0, 3.0])
    assert noise([1.0, 3.0], "median_stderr") == median_rel_stderr([1.0, 3.0])


# ---- pairs -----------------------------------------------------------------------------------------

def test_pairs_alternate_abba_and_stop_on_the_noise_of_the_ratios() -> None:
    calls: list[str] = []
    now = [0.0]

    def side(name: str, seconds: Callable[[], float]) -> Callable[[], Reading]:
        def read() -> Reading:
            calls.append(name)
            value = seconds()
            now[0] += value
            return Reading(value)
        return read

    # both sides drift by 30% over the run (each side alone is noisy); the ratio stays exactly 1.1
    drift = lambda: 1.0 + 0.3 * now[0] / 3.0    # noqa: E731
    base, head = measure_pairs(side("b", lambda: 0.01 * drift()), side("h", lambda: 0.011 * drift()),
                               settings(min_time_s=0.0, max_rel_noise=0.001), clock=lambda: now[0])
    assert calls[:8] == ["b", "h", "h", "b", "b", "h", "h", "b"]
    assert len(base.readings) == len(head.readings) == 10      # ratios steady: stops at min_samples
    ratios = [h / b for b, h in zip(base.samples, head.samples)]
    assert all(r == pytest.approx(1.1, rel=0.01) for r in ratios)
    assert median_rel_stderr(head.samples) > 0.001              # a side alone would not have stopped


def test_pairs_continue_the_pattern_across_rounds() -> None:
    assert [pair_order(i) for i in range(4)] == [(0, 1), (1, 0), (0, 1), (1, 0)]


def test_device_overrides_by_kind_then_name() -> None:
    base = MeasurementSettings(device_overrides={"gpu": {"min_time_s": 0.5, "rounds": 3},
                                                 "nvidia-h100-sxm": {"rounds": 7}})
    assert base.for_device("pixel-8-pro-cpu-big", "phone") == base
    gpu = base.for_device("nvidia-h200", "gpu")
    assert (gpu.min_time_s, gpu.rounds) == (0.5, 3)
    h100 = base.for_device("nvidia-h100-sxm", "gpu")
    assert (h100.min_time_s, h100.rounds) == (0.5, 7)
    with pytest.raises(ValueError, match="unknown measurement settings"):
        MeasurementSettings(device_overrides={"gpu": {"min_tim_s": 1}})
    assert MeasurementSettings().for_device("x", "gpu").max_rel_noise == 0.005    # NVBench's default on GPUs
