"""Statistics on latency samples: pure functions, named defaults, stated assumptions.

Assumptions shared by everything here:
- samples of one side are independent repetitions of the same measurement (no autocorrelation
  correction); base and head are independent of each other (not paired), except in
  `paired_verdict`, where sample i of base and of head were timed back to back;
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

from scipy.stats import mannwhitneyu, wilcoxon

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
    n = len(values)
    mean = math.fsum(values) / n
    # Two passes with fsum: correctly rounded sums, within an ulp or two of statistics.stdev's
    # exact fractions and ~20 times faster (ingest summarizes every case result it stores).
    stdev = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return SampleStats(n=n, median=statistics.median(values), mean=mean, stdev=stdev, min=min(values), max=max(values))


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


def min_pairs(max_pvalue: float = MAX_PVALUE, min_samples: int = MIN_SAMPLES) -> int:
    """Fewest pairs for which `paired_verdict` can call anything significant.

    The smallest two-sided exact signed-rank p-value with n pairs is 2 / 2**n (every ratio on the
    same side), so fewer than log2(2 / max_pvalue) pairs can never reach max_pvalue: 8 pairs for
    0.01 (2/256 = 0.0078), 7 for 0.05. Never fewer than `min_samples`.
    """
    return max(min_samples, math.ceil(math.log2(2 / max_pvalue) - 1e-12))


def paired_test(base: Sequence[float], head: Sequence[float]) -> float:
    """Two-sided Wilcoxon signed-rank p-value that the log ratios log(head[i] / base[i]) are centred on 0.

    Valid when the pairs are independent of each other (one pair per round), and the log ratios
    are symmetric about their median (the signed-rank test's assumption; a ratio of two latencies
    taken back to back is close to log-symmetric). Drift of the device that is slow compared with
    one pair cancels in the ratio, which is why a paired test sees a 3% change that unpaired
    samples spread by 10% of clock drift cannot. Zero log ratios are dropped (Wilcoxon's method);
    none left, or all equal, gives 1.0. scipy takes the exact distribution for small n without
    ties, the normal approximation otherwise; cost O(n log n). Raises ValueError on unequal lengths
    or no pairs.
    """
    if len(base) != len(head) or not base:
        raise ValueError(f"paired_test needs equally many base and head samples, got {len(base)} and {len(head)}")
    logs = [math.log(h / b) for b, h in zip(base, head, strict=True)]
    if all(v == 0 for v in logs):
        return 1.0
    pvalue = float(wilcoxon(logs, alternative="two-sided").pvalue)
    return 1.0 if math.isnan(pvalue) else pvalue


def paired_verdict(
    base: Sequence[float],
    head: Sequence[float],
    *,
    lower_is_better: bool = True,
    min_change: float = MIN_CHANGE,
    max_pvalue: float = MAX_PVALUE,
    min_samples: int = MIN_SAMPLES,
) -> Verdict:
    """`verdict` for paired samples: the change is the median of the ratios head[i] / base[i] minus 1
    (through the logs, so an even count takes the geometric mean of the middle two), the test is
    `paired_test`; fewer than `min_pairs(max_pvalue, min_samples)` pairs is "insufficient data"."""
    if len(base) != len(head):
        raise ValueError(f"paired samples differ in length: {len(base)} base, {len(head)} head")
    if not base:
        return Verdict("insufficient data", None, None)
    change = math.exp(statistics.median(math.log(h / b) for b, h in zip(base, head, strict=True))) - 1
    if len(base) < min_pairs(max_pvalue, min_samples):
        return Verdict("insufficient data", change, None)
    pvalue = paired_test(base, head)
    if pvalue > max_pvalue or abs(change) < min_change:
        return Verdict("similar", change, pvalue)
    worse = change > 0 if lower_is_better else change < 0
    return Verdict("regressed" if worse else "improved", change, pvalue)
