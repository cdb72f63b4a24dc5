"""Metrics and which direction is better: data on the metric, never a list of units elsewhere."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.contracts.counters import COUNTERS


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    lower_is_better: bool


LATENCY = "latency"
"""The metric the agents time and verdicts judge; compile figures come from the build, counters from the
agent's profiler."""

METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric(LATENCY, "s", lower_is_better=True),
        Metric("compile_time", "s", lower_is_better=True),
        Metric("binary_size", "B", lower_is_better=True),
        Metric("registers", "regs", lower_is_better=True),
        Metric("spills", "B", lower_is_better=True),
        Metric("shared_bytes", "B", lower_is_better=True),
        # hardware counters of one launch (`pipeline.contracts.counters`), deterministic: series of their own
        *(Metric(c.name, c.unit, lower_is_better=c.lower_is_better) for c in COUNTERS.values()),
    )
}
