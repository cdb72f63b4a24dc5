"""Statistics on latency samples: pure functions, named defaults, stated assumptions.

Assumptions shared by everything here:
- samples of one side are independent repetitions of the same measurement (no autocorrelation
  correction); base and head are independent of each other (not paired);
- samples are positive and finite (the result contract enforces it);
- the median is the location estimate: latency distributions are skewed to the right (a few
  slow repetitions from interrupts or clock changes), so the mean is not used for verdicts.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from scipy.stats import mannwhitneyu

from pipeline.contracts import SampleStats

MIN_CHANGE = 0.05
"""Smallest relative change of the median called a regression or an improvement."""
MAX_PVALUE = 0.01
"""Largest rank-test p-value called significant."""
MIN_SAMPLES = 5
"""Fewer samples on either side: insufficient data. With 5 vs 5 and no ties the smallest possible
two-sided exact Mann-Whitney p-value is 2/252 = 0.0079, just under MAX_PVALUE."""

VerdictStatus = Literal["regressed", "improved", "similar", "insufficient data"]


def summarize(samples: Sequence[float]) -> SampleStats:
    """n, median, mean, sample standard deviation (n - 1 denominator; 0 for a single sample), min, max.

    Raises ValueError for an empty sequence, and (through SampleStats) for non-positive or
    non-finite values.
    """
    if not samples:
        raise ValueError("cannot summarize no samples")
    values = [float(v) for v in samples]
    return SampleStats(
        n=len(values),
        median=statistics.median(values),
        mean=statistics.fmean(values),
        stdev=statistics.stdev(values) if len(values) > 1 else 0.0,
        min=min(values),
        max=max(values),
    )


def rank_test(base: Sequence[float], head: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value that base and head come from the same distribution.

    Valid for independent samples of any (continuous) distribution; it tests a shift in location
    without assuming normality, which suits skewed latencies. scipy picks the exact distribution
    for small samples without ties and the normal approximation (with tie correction) otherwise;
    cost O((n + m) log(n + m)). When every value on both sides is equal there is no evidence of a
    difference and the p-value is 1.0. Raises ValueError when a side is empty.
    """
    if not base or not head:
        raise ValueError("rank_test needs at least one sample on each side")
    if min(base) == max(base) == min(head) == max(head):
        return 1.0
    pvalue = float(mannwhitneyu(base, head, alternative="two-sided").pvalue)
    return 1.0 if math.isnan(pvalue) else pvalue


@dataclass(frozen=True)
class Verdict:
    status: VerdictStatus
    change: float | None
    """head median / base median - 1; None when a side has no samples."""
    pvalue: float | None
    """None when the rank test was not run (insufficient data)."""


def verdict(
    base: Sequence[float],
    head: Sequence[float],
    *,
    lower_is_better: bool = True,
    min_change: float = MIN_CHANGE,
    max_pvalue: float = MAX_PVALUE,
    min_samples: int = MIN_SAMPLES,
) -> Verdict:
    """Is head worse, better or the same as base?

    A change counts only when it is both significant (rank-test p <= max_pvalue) and large
    (|change| >= min_change): a significant 0.1% shift is "similar", and so is a 20% shift that
    the samples cannot tell from noise. Fewer than `min_samples` on either side is "insufficient
    data" (the change is still reported when both sides have samples).
    """
    change = statistics.median(head) / statistics.median(base) - 1 if base and head else None
    if change is None or len(base) < min_samples or len(head) < min_samples:
        return Verdict("insufficient data", change, None)
    pvalue = rank_test(base, head)
    if pvalue > max_pvalue or abs(change) < min_change:
        return Verdict("similar", change, pvalue)
    worse = change > 0 if lower_is_better else change < 0
    return Verdict("regressed" if worse else "improved", change, pvalue)
