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

import numpy as np
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


Pair = tuple[Sequence[float], Sequence[float]]
"""(base samples, head samples)."""


def rank_test(base: Sequence[float], head: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value that base and head come from the same distribution.

    Valid for independent samples of any (continuous) distribution; it tests a shift in location
    without assuming normality, which suits skewed latencies. scipy's choice is kept: the exact
    distribution when a side has at most 8 samples and there are no ties, the normal approximation
    (with tie correction) otherwise; cost O((n + m) log(n + m)). When every value on both sides is
    equal there is no evidence of a difference and the p-value is 1.0. Raises ValueError when a
    side is empty.
    """
    return rank_tests([(base, head)])[0]


def rank_tests(pairs: Sequence[Pair]) -> list[float]:
    """`rank_test` of each (base, head) pair, vectorised over the pairs of equal sample counts.

    The same p-values as one call per pair: the exact-or-approximate choice scipy would make for a
    pair alone is made per pair here (a vectorised scipy call would make it once for the whole
    batch). A comparison page tests thousands of pairs; one scipy call each costs ~0.6 ms, a batch
    a few microseconds per pair.
    """
    out = [1.0] * len(pairs)
    for (n1, n2), index in _by_sizes(pairs).items():
        if n1 == 0 or n2 == 0:
            raise ValueError("rank_test needs at least one sample on each side")
        base = np.array([pairs[i][0] for i in index], dtype=float)
        head = np.array([pairs[i][1] for i in index], dtype=float)
        pooled = np.sort(np.concatenate([base, head], axis=1), axis=1)
        constant = pooled[:, 0] == pooled[:, -1]
        ties = (np.diff(pooled, axis=1) == 0).any(axis=1)
        exact = ~constant & ~ties & (min(n1, n2) <= 8)
        for mask, method in ((exact, "exact"), (~constant & ~exact, "asymptotic")):
            if mask.any():
                p = mannwhitneyu(base[mask], head[mask], axis=1, method=method, alternative="two-sided").pvalue
                for row, value in zip(np.flatnonzero(mask), np.atleast_1d(p), strict=True):
                    out[index[row]] = 1.0 if math.isnan(value) else float(value)
    return out


def _by_sizes(pairs: Sequence[Pair]) -> dict[tuple[int, int], list[int]]:
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (base, head) in enumerate(pairs):
        groups.setdefault((len(base), len(head)), []).append(i)
    return groups


@dataclass(frozen=True)
class Verdict:
    status: VerdictStatus
    change: float | None
    """head median / base median - 1; None when a side has no samples."""
    pvalue: float | None
    """None when the rank test was not run (insufficient data)."""


def _decide(change: float | None, pvalue: float | None, *, lower_is_better: bool, min_change: float,
            max_pvalue: float) -> Verdict:
    if change is None or pvalue is None:
        return Verdict("insufficient data", change, None)
    if pvalue > max_pvalue or abs(change) < min_change:
        return Verdict("similar", change, pvalue)
    worse = change > 0 if lower_is_better else change < 0
    return Verdict("regressed" if worse else "improved", change, pvalue)


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
    return verdicts([(base, head)], lower_is_better=lower_is_better, min_change=min_change, max_pvalue=max_pvalue,
                    min_samples=min_samples)[0]


def verdicts(
    pairs: Sequence[Pair],
    *,
    lower_is_better: bool = True,
    min_change: float = MIN_CHANGE,
    max_pvalue: float = MAX_PVALUE,
    min_samples: int = MIN_SAMPLES,
) -> list[Verdict]:
    """`verdict` of each (base, head) pair, the rank tests batched (`rank_tests`)."""
    changes = [statistics.median(h) / statistics.median(b) - 1 if b and h else None for b, h in pairs]
    tested = [i for i, (b, h) in enumerate(pairs)
              if changes[i] is not None and len(b) >= min_samples and len(h) >= min_samples]
    pvalues = dict(zip(tested, rank_tests([pairs[i] for i in tested]), strict=True))
    return [_decide(change, pvalues.get(i), lower_is_better=lower_is_better, min_change=min_change,
                    max_pvalue=max_pvalue) for i, change in enumerate(changes)]


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
    none left, or all equal, gives 1.0. scipy takes the exact distribution for up to 50 pairs
    without ties or zeros, a permutation test for up to 13 pairs with them, the normal
    approximation otherwise; cost O(n log n). Raises ValueError on unequal lengths or no pairs.
    """
    return paired_tests([(base, head)])[0]


def paired_tests(pairs: Sequence[Pair]) -> list[float]:
    """`paired_test` of each (base, head) pair: the pairs of equal length without zero or tied
    log ratios (nearly all, for measured latencies) in one vectorised call per length, the others
    one by one, so each gets the method scipy would choose for it alone."""
    out = [1.0] * len(pairs)
    for (n, m), index in _by_sizes(pairs).items():
        if n != m or n == 0:
            raise ValueError(f"paired_test needs equally many base and head samples, got {n} and {m}")
        logs = np.log(np.array([pairs[i][1] for i in index], dtype=float)
                      / np.array([pairs[i][0] for i in index], dtype=float))
        magnitudes = np.sort(np.abs(logs), axis=1)
        clean = (magnitudes[:, 0] != 0) & ~(np.diff(magnitudes, axis=1) == 0).any(axis=1)
        if clean.any():
            method = "exact" if n <= 50 else "asymptotic"  # scipy's own choice for a pair without ties or zeros
            p = wilcoxon(logs[clean], axis=1, alternative="two-sided", method=method).pvalue
            for row, value in zip(np.flatnonzero(clean), np.atleast_1d(p), strict=True):
                out[index[row]] = 1.0 if math.isnan(value) else float(value)
        for row in np.flatnonzero(~clean):
            if (logs[row] != 0).any():
                value = float(wilcoxon(logs[row], alternative="two-sided").pvalue)
                out[index[row]] = 1.0 if math.isnan(value) else value
    return out


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
    return paired_verdicts([(base, head)], lower_is_better=lower_is_better, min_change=min_change,
                           max_pvalue=max_pvalue, min_samples=min_samples)[0]


def paired_verdicts(
    pairs: Sequence[Pair],
    *,
    lower_is_better: bool = True,
    min_change: float = MIN_CHANGE,
    max_pvalue: float = MAX_PVALUE,
    min_samples: int = MIN_SAMPLES,
) -> list[Verdict]:
    """`paired_verdict` of each (base, head) pair, the signed-rank tests batched (`paired_tests`)."""
    for base, head in pairs:
        if len(base) != len(head):
            raise ValueError(f"paired samples differ in length: {len(base)} base, {len(head)} head")
    changes = [math.exp(statistics.median(math.log(h / b) for b, h in zip(base, head, strict=True))) - 1
               if base else None for base, head in pairs]
    enough = min_pairs(max_pvalue, min_samples)
    tested = [i for i, (base, _) in enumerate(pairs) if base and len(base) >= enough]
    pvalues = dict(zip(tested, paired_tests([pairs[i] for i in tested]), strict=True))
    return [_decide(change, pvalues.get(i), lower_is_better=lower_is_better, min_change=min_change,
                    max_pvalue=max_pvalue) for i, change in enumerate(changes)]
