"""Metrics and which direction is better: data on the metric, never a list of units elsewhere."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    lower_is_better: bool


LATENCY = "latency"
"""The metric the agents time and verdicts judge; the others come from the build."""

METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric(LATENCY, "s", lower_is_better=True),
        Metric("compile_time", "s", lower_is_better=True),
        Metric("binary_size", "B", lower_is_better=True),
        Metric("registers", "regs", lower_is_better=True),
        Metric("spills", "B", lower_is_better=True),
        Metric("shared_bytes", "B", lower_is_better=True),
    )
}
