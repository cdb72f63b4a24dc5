"""Statistics on latency samples: pure functions over timing rounds (the round, not the sample, is the
unit of replication), the changes, intervals and verdicts they give, and the noise learned from history
that sets each case's threshold.

The assumptions and the measurements behind them: docs/design.md, "Round-level statistics".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Literal

import numpy as np
# The distributions' own special functions (what scipy.stats calls, bit for bit): importing scipy.stats
# costs every `benchfarm` command that reads a verdict about half a second of start-up
from scipy.special import fdtri, stdtr, stdtrit

from pipeline.config import CompareSettings
from pipeline.contracts.result import summarize as summarize  # re-exported: stats is where callers look
from pipeline.contracts.rounds import (  # noqa: F401  (ROUND_TRIM and more re-exported with the rest of the rules)
    CONFIDENCE,
    CHI2_1_MEDIAN,
    DEFAULT_BLOCKS,
    MAX_PVALUE,
    NOISE_FACTOR,
    PAIRED_DISPERSION_FLOOR,
    POOLED_MIN_ITEMS,
    ROUND_TRIM,
    PairedSamples,
    Samples,
    block_sizes,
    classify,
    mean_var,
    paired_levels,
    per_group,
    provisional_threshold,
    round_values,
    t_pvalue,
    t_quantile,
)
from pipeline.contracts.rounds import run_dispersion as _run_dispersion

_DEFAULTS = CompareSettings()
"""The functions' defaults are the settings' (`pipeline.config.CompareSettings`), defined there once."""
MIN_CHANGE: float = _DEFAULTS.min_change
"""Smallest relative change of the median called a regression or an improvement (the floor)."""
MIN_ROUNDS: int = _DEFAULTS.min_rounds
"""Fewer rounds on a side (paired: pairs of rounds): insufficient data. With 2 rounds a t-test has
one degree of freedom and its 95 % interval is +-12.7 standard errors: no answer worth giving."""
MIN_SAMPLES: int = _DEFAULTS.min_samples
"""Fewer samples on a side: insufficient data, whatever the rounds."""
MAD_TO_SD = 1.4826
"""A normal distribution's standard deviation is 1.4826 times its median absolute deviation (scipy's
`median_abs_deviation(scale="normal")`: 1.4826022; the learned thresholds were measured with this one)."""
NOISE_MIN_POINTS = 5
"""Fewest changes a noise is learned from (`paired_noise`, `run_to_run_noise`); fewer: unknown."""

VerdictStatus = Literal["regressed", "improved", "similar", "inconclusive", "insufficient data"]
Rounds = Sequence[int] | None
"""Samples per round, in order (sum = number of samples); None: not reported."""


def round_sizes(n: int, rounds: Rounds, blocks: int = DEFAULT_BLOCKS) -> list[int]:
    """The rounds of a result of n samples: the reported ones, or else `blocks` consecutive blocks
    of nearly equal size (larger first; n blocks of one sample when n < blocks). Raises ValueError
    when reported rounds do not add up to n."""
    if rounds is not None:
        if sum(rounds) != n or any(r < 1 for r in rounds):
            raise ValueError(f"rounds {list(rounds)} do not split {n} samples")
        return list(rounds)
    return list(block_sizes(n, blocks))


@dataclass(frozen=True)
class Estimate:
    """A relative change with its interval and test, from round-level values."""

    change: float | None
    """exp(mean log difference) - 1; None when a side has no samples."""
    ci_low: float | None
    ci_high: float | None
    """the `CONFIDENCE` interval of the change; None with fewer than 2 rounds a side"""
    pvalue: float | None
    """two-sided p-value of "no change"; None with fewer than 2 rounds a side"""
    rounds: int
    """replicates behind it: rounds (paired), the smaller side's rounds (unpaired)"""
    spread: float | None = None
    """the standard deviation of the round levels' differences (logs, not calibrated: paired, of the rounds'
    log ratios; unpaired, of one base round's level minus one head round's); None below 2 rounds"""


@dataclass(frozen=True)
class Verdict:
    status: VerdictStatus
    change: float | None
    pvalue: float | None
    """None when not tested (insufficient data)."""
    ci_low: float | None = None
    ci_high: float | None = None
    threshold: float | None = None
    """the smallest |change| that counts for this case (`threshold`)"""
    rounds: int = 0


def _t_interval(mean: np.ndarray, se: np.ndarray, df: np.ndarray, confidence: float
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two-sided t-test of mean = 0 and the interval mean +- t(df) se, on the log scale. A zero
    standard error (every round alike) gives p 1 for a zero mean, 0 otherwise, and a point interval.
    Whole degrees of freedom (the paired test's rounds - 1) read Student's t through
    `pipeline.contracts.rounds`, as the agent's stop rule does; others (Welch's) through scipy."""
    df = np.where(df >= 1, df, 1)   # below 1: not tested (`_estimates`); any value keeps the arithmetic quiet
    with np.errstate(invalid="ignore", divide="ignore"):
        statistic = np.where(se > 0, np.abs(mean) / np.where(se > 0, se, 1), np.where(mean == 0, 0.0, np.inf))
        pvalue = np.asarray(2 * stdtr(df, -statistic))   # Student's t survival function
        quantile = np.asarray(stdtrit(df, 0.5 + confidence / 2))
        whole = (df == np.round(df)) & ~np.isnan(statistic)
        if whole.any():
            pvalue[whole] = t_pvalue(statistic[whole], df[whole].astype(int))
            quantile[whole] = [t_quantile(confidence, int(v)) for v in df[whole].tolist()]
        half = quantile * np.where(se > 0, se, 0)
    return np.minimum(pvalue, 1.0), mean - half, mean + half


def _estimates(mean: np.ndarray, pvalue: np.ndarray, low: np.ndarray, high: np.ndarray, tested: np.ndarray,
               rounds: np.ndarray, present: Sequence[bool]) -> list[Estimate]:
    change, low, high = np.expm1(mean).tolist(), np.expm1(low).tolist(), np.expm1(high).tolist()
    out = []
    for i, (here, test, p, r) in enumerate(zip(present, tested.tolist(), pvalue.tolist(), rounds.tolist(),
                                               strict=True)):
        if not here:
            out.append(Estimate(None, None, None, None, 0))
        elif not test:
            out.append(Estimate(change[i], None, None, None, r))
        else:
            out.append(Estimate(change[i], low[i], high[i], p, r))
    return out


def paired_estimates(items: Sequence[PairedSamples], *, calibration: Sequence[bool] | None = None,
                     groups: Sequence[str] | None = None, confidence: float = CONFIDENCE,
                     blocks: int = DEFAULT_BLOCKS) -> list[Estimate]:
    """The change of each paired result from its rounds: per round r, l_r = the mean of the middle
    fifth of the round's log(head_i / base_i); change = exp(mean l_r) - 1; interval
    exp(mean +- t(0.975, R - 1) sd / sqrt(R)) - 1; p from the one-sample t-test of the l_r.

    Valid when the rounds are independent (each its own placement and order: the agents rotate
    buffers and alternate the order between rounds) and the l_r near normal. Device drift slower
    than a pair cancels in each ratio. Vectorised over all items (one sort); raises ValueError
    when base and head differ in length or the rounds do not add up.

    `calibration` marks the items whose base and head are the same binary: free A/A measurements
    of this very job. When at least `POOLED_MIN_ITEMS` of them (of an item's group, else of all
    items) are testable, every item's variance is scaled by their `run_dispersion`: how much more,
    or less, identical binaries' paired changes spread than their rounds say (a 2-core CPU's paired
    A/A: 1.2-2.5, its p-values piled near 0 without it; an H100's: 0.7-1.5). Identical binaries
    cannot have changed, so no real change enters the estimate, and it is taken as it comes, down to
    `PAIRED_DISPERSION_FLOOR`: held at 1 or more, a chance low estimate of a job whose true factor is
    1 was raised and its p-values pushed up (three H100 A/A nightlies: mean 0.525, pooled KS p 0.039;
    as it comes: 0.510 and 0.48).
    """
    mean, se, counts, spread = paired_levels(items, calibration=calibration, groups=groups, blocks=blocks)
    tested = counts >= 2
    pvalue, low, high = _t_interval(mean, se, counts - 1, confidence)
    estimates = _estimates(mean, pvalue, low, high, tested, counts, [len(b) > 0 for b, _, _ in items])
    return [replace(e, spread=sd) if e.pvalue is not None and math.isfinite(sd) else e
            for e, sd in zip(estimates, spread.tolist(), strict=True)]


Side = tuple[Samples, Rounds]
"""(samples, rounds) of one side of an unpaired comparison."""


def unpaired_estimates(items: Sequence[tuple[Side, Side]], *, run_noise: float | Sequence[float | None] | None = None,
                       default_run_noise: float | None = None, groups: Sequence[str] | None = None,
                       calibration: Sequence[bool] | None = None,
                       confidence: float = CONFIDENCE, blocks: int = DEFAULT_BLOCKS) -> list[Estimate]:
    """The change between two separately timed results (base, head): per side, the mean of each
    round's middle fifth of the log samples; change = exp(mean_h - mean_b) - 1; a t-test of the difference and its interval.

    Two levels of variation (Kalibera and Jones): rounds within a run, and runs. The rounds of one
    side show only the first; an offset the whole run shares (its load, placement, a warm or cool
    device) is invisible to them, and two runs of one binary differ by more than their rounds say.
    `run_noise` is the sd of one run's level in logs (`Series.noise_unpaired`, from the series'
    history; one value for all items or one per item, None: not known): each side's variance is then
    max(its rounds' variance of the mean, run_noise^2), the history's taking the place of what one
    run cannot show (Welch-Satterthwaite degrees of freedom; a history term counts as known, adding
    no degrees of freedom).

    Items whose run noise is not known (a fresh series) borrow it from each other (`run_dispersion`):
    with at least `POOLED_MIN_ITEMS` testable items, their rounds' variances are scaled by how much
    more the items' changes spread than their rounds say, but never past the variance
    `default_run_noise` implies (2 x its square: the default is the most a fresh series assumes, the
    comparison's own evidence can only lower it); with fewer, `default_run_noise` takes the place of
    the history (None: Welch's test of the round values alone). `groups` (one label per item) keeps
    apart items measured by different machinery, whose runs differ by different amounts (vendor
    controls replay torch graphs, suite cases launch cubins): a group with `POOLED_MIN_ITEMS` testable
    items pools within itself, a smaller one from all items. Vectorised.

    `calibration` marks the items whose base and head are the same binary. They cannot have changed,
    so what still separates them after all of the above is a shift the two runs share (a loaded or
    throttled host: a 2-core VM's head run once read 4-43 % slower in all 20 of its identical cases):
    `run_shift_variance`, added to every item of the group, unbounded. Zero when the identical items
    agree with the variances already used: it never makes a test bolder.
    """
    base_logs, base_counts = round_values([b for b, _ in items], blocks, "log")
    head_logs, head_counts = round_values([h for _, h in items], blocks, "log")
    base_mean, base_var = mean_var(base_logs, base_counts)
    head_mean, head_var = mean_var(head_logs, head_counts)
    run_var = np.square(np.asarray(_per_item(run_noise, len(items)), dtype=float))   # nan where unknown
    with np.errstate(invalid="ignore", divide="ignore"):
        vb, vh = base_var / base_counts, head_var / head_counts
        unknown = np.isnan(run_var)
        welch_df = (vb + vh) ** 2 / (vb ** 2 / (base_counts - 1) + vh ** 2 / (head_counts - 1))
        dispersion = (_group_dispersions(head_mean - base_mean, vb + vh, welch_df, groups) if unknown.any()
                      else np.full(len(items), np.nan))
        pooled = ~np.isnan(dispersion)
        if pooled.any():
            # never more than the default assumes (a change between runs of 2 x its variance): where
            # most rows really changed the dispersion is large, and there the default's test applies
            capped = (unknown & pooled & (dispersion * (vb + vh) >= 2 * default_run_noise ** 2) if default_run_noise
                      else np.zeros(len(items), dtype=bool))
            scaled = unknown & pooled & ~capped
            vb, vh = np.where(scaled, vb * dispersion, vb), np.where(scaled, vh * dispersion, vh)
            run_var = np.where(capped, (default_run_noise or 0.0) ** 2, run_var)
        if default_run_noise:
            run_var = np.where(unknown & ~pooled, default_run_noise ** 2, run_var)
        known = ~np.isnan(run_var)
        # a side whose run-level variance dominates (or that has no variance of its own) is taken as
        # known: its term adds no degrees of freedom
        use_b = known & (np.isnan(vb) | (run_var > vb))
        use_h = known & (np.isnan(vh) | (run_var > vh))
        vb_total, vh_total = np.where(use_b, run_var, vb), np.where(use_h, run_var, vh)
        se = np.sqrt(vb_total + vh_total)
        dof_terms = (np.where(use_b, 0.0, vb ** 2 / (base_counts - 1))
                     + np.where(use_h, 0.0, vh ** 2 / (head_counts - 1)))
        df = _welch_df(vb_total + vh_total, dof_terms, np.where(known, KNOWN_VARIANCE_DF, base_counts + head_counts - 2))
        diff = head_mean - base_mean
        if calibration is not None:
            if len(calibration) != len(items):
                raise ValueError(f"{len(calibration)} calibration marks for {len(items)} comparisons")
            shift = per_group(run_shift_variance, diff, vb_total + vh_total, df, groups,
                               pool=np.asarray(calibration, dtype=bool), min_items=SHIFT_MIN_ITEMS)
            shift = np.where(np.isnan(shift), 0.0, shift)
            # a known variance: it adds to the total and to no side's degrees of freedom
            total = vb_total + vh_total + shift
            df = _welch_df(total, dof_terms, np.where(shift > 0, KNOWN_VARIANCE_DF, df))
            se = np.sqrt(total)
    tested = (base_counts >= 2) & (head_counts >= 2)
    pvalue, low, high = _t_interval(diff, se, df, confidence)
    estimates = _estimates(diff, pvalue, low, high, tested, np.minimum(base_counts, head_counts),
                           [len(b[0]) > 0 and len(h[0]) > 0 for b, h in items])
    # the spread of a difference of one base round and one head round (`provisional_threshold`)
    spread = np.sqrt(base_var + head_var).tolist()
    return [replace(e, spread=sd) if e.pvalue is not None and math.isfinite(sd) else e
            for e, sd in zip(estimates, spread, strict=True)]


def _welch_df(total: np.ndarray, dof_terms: np.ndarray, otherwise: np.ndarray) -> np.ndarray:
    """Welch-Satterthwaite degrees of freedom of a variance `total` whose estimated terms contribute
    `dof_terms` (sum of term^2 / df); `otherwise` where there is no such term or no variance."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((total > 0) & (dof_terms > 0), total ** 2 / np.where(dof_terms > 0, dof_terms, 1), otherwise)


SHIFT_MIN_ITEMS = 10
"""Fewest identical-binary items a shared run shift is estimated from (`run_shift_variance`): a
median of 10 is rough, but it only ever widens tests, and a 20-case CPU suite with one kernel
changed still has 19."""


def run_shift_variance(diffs: np.ndarray, variances: np.ndarray, min_items: int = SHIFT_MIN_ITEMS,
                       df: np.ndarray | None = None) -> float | None:
    """The variance (logs) two runs share beyond `variances`, from items that cannot have changed
    (identical binaries): the smallest s >= 0 for which median(diff^2 / ((variance + s) m)) <= 1,
    m the median of F(1, df) (of chi-square with one degree of freedom without `df`). None with
    fewer than `min_items` usable items.

    Additive, unlike `run_dispersion`'s factor: a shift the whole run shares moves a quiet case
    as much as a noisy one, and a factor large enough for the noisy ones would leave the quiet ones
    flagged. The median ignores up to half of the items being odd.
    """
    usable = np.isfinite(diffs) & np.isfinite(variances) & (variances >= 0)
    if df is not None:
        usable &= np.isfinite(df) & (df > 0)
    if int(usable.sum()) < min_items:
        return None
    d2 = np.square(diffs[usable])
    v = variances[usable]
    m = _f1_median(np.minimum(df[usable], KNOWN_VARIANCE_DF)) if df is not None else CHI2_1_MEDIAN

    def excess(s: float) -> float:
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(np.median(np.where(d2 > 0, d2 / ((v + s) * m), 0.0))) - 1.0

    if excess(0.0) <= 0.0:
        return 0.0
    # excess falls continuously and strictly from > 0 to <= 0 over [0, high] (at high every term is <= 1):
    # its one root, to 4 ulp. The 60-step bisection it replaces stopped at high / 2^60: within 2e-11 of it.
    from scipy.optimize import brentq   # here: scipy.optimize's import is as slow as its root is rare

    return float(brentq(excess, 0.0, float(np.max(d2 / m)), xtol=SHIFT_XTOL, rtol=4 * np.finfo(float).eps))


SHIFT_XTOL = 1e-300
"""`run_shift_variance`'s absolute tolerance: none to speak of (the relative one decides)."""


def run_dispersion(diffs: np.ndarray, variances: np.ndarray, min_items: int = POOLED_MIN_ITEMS,
                   df: np.ndarray | None = None, floor: float = 1.0) -> float | None:
    """`pipeline.contracts.rounds.run_dispersion` for any degrees of freedom (Welch's are fractional):
    the medians of F(1, df) from scipy."""
    return _run_dispersion(diffs, variances, min_items, df, floor, f1_median=_f1_median)


def _f1_median(df: np.ndarray) -> np.ndarray:
    """The medians of F(1, df) (`scipy.stats.f.median(1, df)`)."""
    return np.asarray(fdtri(1, df, 0.5), dtype=float)


def _group_dispersions(diffs: np.ndarray, variances: np.ndarray, df: np.ndarray, groups: Sequence[str] | None,
                       pool: np.ndarray | None = None, floor: float = 1.0) -> np.ndarray:
    """Per item: `run_dispersion` (with `floor`) over its group (`_per_group`)."""
    return per_group(partial(run_dispersion, floor=floor), diffs, variances, df, groups, pool=pool,
                     min_items=POOLED_MIN_ITEMS)


KNOWN_VARIANCE_DF = 1e6
"""Degrees of freedom of a variance taken as known (the run-level one from history): the normal."""


def _per_item(value: float | Sequence[float | None] | None, count: int) -> list[float]:
    if value is None or isinstance(value, int | float):
        return [math.nan if value is None else float(value)] * count
    if len(value) != count:
        raise ValueError(f"{len(value)} run noises for {count} comparisons")
    return [math.nan if v is None else float(v) for v in value]


def threshold(minimum: float, noise: float | None, factor: float = NOISE_FACTOR, floor: float | None = None) -> float:
    """The smallest |change| a case's verdict counts (`pipeline.contracts.rounds.classify`): `minimum`
    while the case's noise is not measured (None), else max(floor, factor x noise), `floor` being
    `minimum` unless given lower: a case whose measured noise is small gets a threshold under the
    minimum assumed for an unknown one (paired GPU cases: `CompareSettings.paired_floor`).

    `noise` is the case's measured standard deviation of a change between identical code on its
    device class (relative). A round-level test cannot see an offset that a whole job shares;
    history can. With normal noise, |change| > 3 sd happens 0.27 % of the time between identical
    binaries: about one false alarm in 8 runs of a 42-case suite if the p-value were fooled every
    time, far fewer since it must also be significant; and a robust sd from 5 to 30 points is itself
    uncertain by +-15 to 35 %, which 3 (not 2) absorbs.
    """
    if noise is None:
        return minimum
    return max(minimum if floor is None else floor, factor * noise)


def robust_sd(values: Sequence[float], *, center: float | None = 0.0) -> float | None:
    """MAD_TO_SD x the median absolute deviation of `values` from `center` (None: from their
    median); None for no values. A few real changes among many repetitions do not move it."""
    if not values:
        return None
    data = np.asarray(values, dtype=float)
    middle = float(np.median(data)) if center is None else center
    # scipy.stats.median_abs_deviation gives these very bits (tests/results/analysis/test_stats.py) but its
    # axis and nan-policy wrapper costs ~350 us a call against ~35: ~7 s more on a re-analysis of 20,000 series
    return MAD_TO_SD * float(np.median(np.abs(data - middle)))


def paired_noise(changes: Sequence[float], min_points: int = NOISE_MIN_POINTS) -> float | None:
    """The noise of a paired change between identical binaries (A/A calibrations): `robust_sd` of
    their log changes about 0, not about their median, since the true change is 0 and an offset
    they share (one slot always slower) is noise a verdict must not take for a change. None with
    fewer than `min_points`."""
    if len(changes) < min_points:
        return None
    return robust_sd([math.log1p(c) for c in changes])


def run_to_run_noise(medians: Sequence[float], digests: Sequence[str | None], min_points: int = NOISE_MIN_POINTS
                     ) -> float | None:
    """One run's noise of the median, from a series' consecutive runs (oldest first, each with the
    digest of the binary it timed, None: unknown): `robust_sd` of the successive differences of the
    log medians about 0, divided by sqrt(2) (a difference of two runs has twice one run's variance).

    Differences between runs of one binary are pure noise; where at least `min_points` such pairs
    exist, only they are used. Otherwise every successive difference: the few that carry a real
    change are outliers the median absolute deviation ignores. None with fewer than `min_points`.
    """
    if len(medians) != len(digests):
        raise ValueError(f"{len(medians)} medians but {len(digests)} digests")
    logs = [math.log(m) for m in medians]
    steps = [(b - a, d is not None and d == e) for a, b, d, e in zip(logs, logs[1:], digests, digests[1:])]
    same = [step for step, alike in steps if alike]
    chosen = same if len(same) >= min_points else [step for step, _ in steps]
    if len(chosen) < min_points:
        return None
    sd = robust_sd(chosen)
    return None if sd is None else sd / math.sqrt(2)


def _decide(estimate: Estimate, threshold_: float, *, lower_is_better: bool, max_pvalue: float,
            enough: bool, different_at: float | None = None) -> Verdict:
    """The three-way verdict (`pipeline.contracts.rounds.classify`): different is regressed or
    improved, same is similar, unknown is inconclusive; insufficient data when not testable."""
    change, pvalue = estimate.change, estimate.pvalue
    status: VerdictStatus
    if not enough or change is None or pvalue is None or estimate.ci_low is None or estimate.ci_high is None:
        status, pvalue = "insufficient data", None
    else:
        answer = classify(change, estimate.ci_low, estimate.ci_high, pvalue, threshold_, max_pvalue,
                          different_at=different_at)
        if answer == "same":
            status = "similar"
        elif answer == "unknown":
            status = "inconclusive"
        else:
            status = "regressed" if (change > 0 if lower_is_better else change < 0) else "improved"
    return Verdict(status, change, pvalue, estimate.ci_low, estimate.ci_high, threshold_, estimate.rounds)


def _thresholds(count: int, min_change: float | Sequence[float]) -> list[float]:
    if isinstance(min_change, int | float):
        return [float(min_change)] * count
    if len(min_change) != count:
        raise ValueError(f"{len(min_change)} thresholds for {count} comparisons")
    return [float(v) for v in min_change]


def paired_verdicts(
    items: Sequence[PairedSamples],
    *,
    lower_is_better: bool = True,
    min_change: float | Sequence[float] = MIN_CHANGE,
    max_pvalue: float = MAX_PVALUE,
    min_rounds: int = MIN_ROUNDS,
    min_samples: int = MIN_SAMPLES,
    calibration: Sequence[bool] | None = None,
    groups: Sequence[str] | None = None,
    learned: Sequence[bool] | None = None,
    noise_factor: float = NOISE_FACTOR,
) -> list[Verdict]:
    """Is head worse, better or the same as its paired base? (`paired_estimates`, with its
    `calibration` and `groups`)

    Three answers (`pipeline.contracts.rounds.classify`) with each item's threshold `min_change` (one
    for all, or one per item: `threshold`): regressed or improved when the change is significant
    (p <= max_pvalue) and at least the threshold; similar when its whole interval lies within
    +-threshold and it is not significant at half the threshold or more; else inconclusive. Fewer than `min_rounds` rounds or `min_samples` pairs:
    insufficient data (the point change is still reported).

    `learned` marks the items whose threshold comes from their learned noise (None: all); the others
    are called different only at `provisional_threshold` (`noise_factor` x their rounds' spread) or more.
    """
    limits = _thresholds(len(items), min_change)
    known = [True] * len(items) if learned is None else list(learned)
    if len(known) != len(items):
        raise ValueError(f"{len(known)} learned marks for {len(items)} comparisons")
    return [_decide(e, limit, lower_is_better=lower_is_better, max_pvalue=max_pvalue,
                    enough=e.rounds >= min_rounds and len(item[0]) >= min_samples,
                    different_at=None if ok else provisional_threshold(limit, e.spread, noise_factor))
            for e, limit, item, ok in zip(paired_estimates(items, calibration=calibration, groups=groups), limits,
                                          items, known, strict=True)]


def verdicts(
    items: Sequence[tuple[Side, Side]],
    *,
    lower_is_better: bool = True,
    min_change: float | Sequence[float] = MIN_CHANGE,
    max_pvalue: float = MAX_PVALUE,
    min_rounds: int = MIN_ROUNDS,
    min_samples: int = MIN_SAMPLES,
    run_noise: float | Sequence[float | None] | None = None,
    default_run_noise: float | None = None,
    groups: Sequence[str] | None = None,
    calibration: Sequence[bool] | None = None,
    noise_factor: float = NOISE_FACTOR,
) -> list[Verdict]:
    """`paired_verdicts` for two separately timed results ((base samples, rounds), (head samples,
    rounds)), by `unpaired_estimates` (with `run_noise`, `default_run_noise`, `groups` and
    `calibration`, the run level of variation); `min_rounds` and `min_samples` apply to each side.
    An item whose `run_noise` is not known (a fresh series) is different only at `provisional_threshold`
    or more (`noise_factor` x the spread of its rounds' differences), as a paired one is."""
    limits = _thresholds(len(items), min_change)
    known = [v is not None and math.isfinite(v) for v in _per_item(run_noise, len(items))]
    estimates = unpaired_estimates(items, run_noise=run_noise, default_run_noise=default_run_noise, groups=groups,
                                   calibration=calibration)
    return [_decide(e, limit, lower_is_better=lower_is_better, max_pvalue=max_pvalue,
                    enough=e.rounds >= min_rounds and min(len(b[0]), len(h[0])) >= min_samples,
                    different_at=None if ok else provisional_threshold(limit, e.spread, noise_factor))
            for e, limit, (b, h), ok in zip(estimates, limits, items, known, strict=True)]
