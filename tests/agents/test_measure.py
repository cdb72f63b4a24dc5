from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from pipeline.agents.measure import median_rel_stderr, sample
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


