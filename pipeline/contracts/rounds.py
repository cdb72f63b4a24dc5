"""How a result's timing rounds are read, and the three-way verdict on a change: one statistic for the
agent (which decides, round by round, whether a case needs more rounds) and the analysis (which
judges the stored rounds). numpy only, so the agent stays light.

A round's level is the mean of its middle fifth (`ROUND_TRIM` cut at each end), in logs: latency is
skewed to the right and a median is a step function of the timer's ticks (docs/design.md, "Round-level
statistics", says why, with the measurements behind it). The rounds are the replicates (Kalibera and Jones,
ISMM 2013): a change's interval is Student's t over them.

The verdict (Pinpoint's and NVBench's robust compare's three answers) with the case's threshold t
(the smallest change that matters, never 0):
- different: the change is significant (p <= max_pvalue) and |change| >= t;
- same: the whole interval lies inside [-t, +t] (an equivalence test: TOST at half the interval's
  miss rate on each side), unless the change is significant and at least half of t
  (`EVIDENT_SHARE`): that is evidence of a change near the threshold's size, not of none;
- unknown: neither. Not significant is not the same: an interval too wide to tell says unknown.

A case whose noise is not learned yet (`DecisionRule.thresholds` lacks it; the store learns it from a
few A/A calibrations) is called different only when its change is also at least `noise_factor` times
the spread of its own rounds (`provisional_threshold`): a round-level test cannot see what a whole job
shares, and until history says how much that is, a case whose rounds scatter by 8 % cannot be trusted
with a 12 % change (a loaded 2-core CPU's memory-bound gather: +11.6 % [+4.4, +19.3] between identical
binaries, its rounds 1.02-1.27 x). The band of same stays the threshold's: a wide spread never makes
same easier.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from itertools import chain
from typing import Literal

import numpy as np

__all__ = [
    "CONFIDENCE",
    "DEFAULT_BLOCKS",
    "EVIDENT_SHARE",
    "MAX_PVALUE",
    "NOISE_FACTOR",
    "PAIRED_MIN_CHANGE",
    "ROUND_TRIM",
    "Answer",
    "DecisionRule",
    "RoundChange",
    "block_sizes",
    "classify",
    "level_halfwidth",
    "paired_change",
    "provisional_threshold",
    "round_values",
    "segment_centres",
    "t_pvalue",
    "t_quantile",
]

ROUND_TRIM = 0.4
"""Share of a round's values left out at each end before its mean (0.5 would be the median)."""
DEFAULT_BLOCKS = 5
"""Rounds made of a result that does not report its rounds: that many consecutive equal blocks."""
CONFIDENCE = 0.95
"""Coverage of a change's interval, the one shown and the one the equivalence test reads."""

MAX_PVALUE = 0.01
"""Largest p-value of a change called different."""
PAIRED_MIN_CHANGE = 0.02
"""Threshold of a paired case whose noise on its device class is not known yet."""
NOISE_FACTOR = 3.0
"""A learned threshold is this many times the case's noise (`pipeline.results.analysis.stats.threshold`); a provisional
one this many times its rounds' spread (`provisional_threshold`)."""

EVIDENT_SHARE = 0.5
"""A significant change of at least this share of the threshold is never called same, though its interval
fits the band. A 1 % slowdown of a decode GEMM on an H200 measured +0.55 % [+0.25, +0.85], p 0.002, in one
job (+1.0 and +0.9 % in two others) against its learned threshold of 0.98 %, and was called same.
Identical binaries seldom are (their calibrated p-values are uniform, and a significant one is mostly a
hundredth of a percent): 1 row of 492 in three whole-suite A/A jobs (BENCHMARKS.md, issue 30)."""

Answer = Literal["different", "same", "unknown"]

STOP_MARGIN = 0.9
"""The agent stops a case once its answer holds with 10 % to spare: its interval within 0.9 of the
band, or its p-value under 0.9 of max_pvalue (`DecisionRule.decided`)."""

Samples = Sequence[float] | np.ndarray
"""One result's samples: a list, or the array a bench or the store already holds (`_flat` takes either)."""


def block_sizes(n: int, blocks: int = DEFAULT_BLOCKS) -> tuple[int, ...]:
    """`blocks` consecutive blocks of n samples, of nearly equal size (larger first; n blocks of one
    when n < blocks): the rounds of a result that does not report its own."""
    return _blocks(n, blocks)


@lru_cache(maxsize=4096)
def _blocks(n: int, blocks: int) -> tuple[int, ...]:
    count = min(blocks, n)  # cached: a comparison asks for the same few sizes thousands of times
    return tuple(n // count + (1 if i < n % count else 0) for i in range(count)) if count else ()


def _trimmed_count(size: int) -> int:
    """Values left out at each end of a round of `size` (small rounds keep their median)."""
    return int(size * ROUND_TRIM)


def segment_centres(values: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The mean of the middle fifth of each consecutive segment of `values` (segment i has sizes[i] >= 1
    values): the segments of one size as the rows of one matrix, one sort each."""
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(int)
    out = np.empty(len(sizes))
    for size in np.unique(sizes):
        which = np.flatnonzero(sizes == size)
        rows = np.sort(values[starts[which][:, None] + np.arange(size)], axis=1)
        cut = _trimmed_count(int(size))
        out[which] = rows[:, cut:int(size) - cut].mean(axis=1)
    return out


def round_values(items: Sequence[tuple[Samples, Sequence[int] | None]], blocks: int = DEFAULT_BLOCKS,
                 transform: Literal["log", "none"] = "log") -> tuple[np.ndarray, np.ndarray]:
    """Round-level values of each item ((samples, samples per round or None), the samples cut into
    their rounds, each round's middle-fifth mean, of the logs when asked) flat, and each item's
    number of rounds. Raises ValueError when reported rounds do not split their samples."""
    sizes: list[Sequence[int]] = []
    for samples, rounds in items:
        if rounds is None:
            sizes.append(_blocks(len(samples), blocks))
        elif sum(rounds) != len(samples) or min(rounds, default=1) < 1:
            raise ValueError(f"rounds {list(rounds)} do not split {len(samples)} samples")
        else:
            sizes.append(rounds)
    counts = np.fromiter(map(len, sizes), dtype=int, count=len(sizes))
    if not counts.sum():
        return np.empty(0), counts
    values = _flat([samples for samples, _ in items])
    # the centre of the logs, not the log of a centre: a mean of ratios is not symmetric in them
    return segment_centres(np.log(values) if transform == "log" else values,
                           np.fromiter(chain.from_iterable(sizes), dtype=int, count=int(counts.sum()))), counts


def _flat(groups: Sequence[Samples]) -> np.ndarray:
    if isinstance(groups[0], np.ndarray):
        return np.concatenate(groups).astype(float, copy=False)
    return np.fromiter(chain.from_iterable(groups), dtype=float, count=sum(map(len, groups)))


# Student's t for whole degrees of freedom (rounds - 1), in closed form (Abramowitz and Stegun 26.7.3
# and 26.7.4, with the tail summed directly where the closed form would cancel): exact to rounding,
# so the agent's stop rule and the analysis read the same p-values and intervals without scipy.
NORMAL_DF = 400
"""Beyond this many degrees of freedom Student's t is taken as the normal (their quantiles differ by < 0.3 %)."""


def t_pvalue(statistic: np.ndarray | float, df: np.ndarray | int) -> np.ndarray:
    """Two-sided p-value P(|T| >= |statistic|) of Student's t with `df` (whole, >= 1) degrees of
    freedom, element-wise; inf gives 0."""
    t = np.abs(np.asarray(statistic, dtype=float))
    nu = np.broadcast_to(np.asarray(df), t.shape).astype(int)
    if np.any(nu < 1):
        raise ValueError("degrees of freedom must be whole numbers >= 1")
    out = np.empty(t.shape)
    normal = nu > NORMAL_DF
    if normal.any():
        out[normal] = [math.erfc(x / math.sqrt(2)) for x in t[normal]]
    for v in np.unique(nu[~normal]):
        which = (nu == v) & ~normal
        out[which] = _t_tail(t[which], int(v))
    return np.clip(out, 0.0, 1.0)


def _t_tail(t: np.ndarray, nu: int) -> np.ndarray:
    """P(|T| >= t), nu degrees of freedom: with x = nu / (nu + t^2) = cos^2 theta, the series of A&S
    26.7.3-4 summed up to nu terms for large p, and its remainder (the same series past nu) for small p,
    which has no cancellation."""
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(np.isinf(t), 0.0, nu / (nu + np.square(t)))
    sin = np.sqrt(1.0 - x)
    theta = np.arctan2(sin, np.sqrt(x))
    odd = nu % 2 == 1
    # head: the first terms of the series (A = P(|T| < t)); coefficient c_k and power x^k
    head = np.zeros_like(t)
    term = np.ones_like(t)
    terms = (nu - 1) // 2 if odd else nu // 2
    for k in range(terms):
        head += term
        term = term * x * ((2 * k + 2) / (2 * k + 3) if odd else (2 * k + 1) / (2 * k + 2))
    inside = (2 / math.pi) * (theta + sin * np.sqrt(x) * head) if odd else sin * head
    out: np.ndarray = 1.0 - inside
    small = inside > 1 - SMALL_P   # 1 - inside would keep few digits: the remainder of the series instead
    if small.any():
        tail = _series_remainder(x[small], term[small], terms, odd)
        out[small] = ((2 / math.pi) * sin[small] * np.sqrt(x[small]) * tail) if odd else sin[small] * tail
    return out


SMALL_P = 1e-3
"""p-values under this are summed as the series' remainder (at most ~4 nu terms there)."""


def _series_remainder(x: np.ndarray, term: np.ndarray, start: int, odd: bool) -> np.ndarray:
    """The rest of the series from term `start` (whose value is `term`), each element summed until
    its terms no longer change it (so an element's sum does not depend on the others beside it); it
    converges like x^k, quickly wherever the p-value is small enough to need it."""
    total = np.zeros_like(x)
    current = term.copy()
    active = np.ones(x.shape, dtype=bool)
    k = start
    while active.any():
        total[active] += current[active]
        active &= current > 1e-17 * total
        current = current * x * ((2 * k + 2) / (2 * k + 3) if odd else (2 * k + 1) / (2 * k + 2))
        k += 1
    return total


@lru_cache(maxsize=1024)
def t_quantile(confidence: float, df: int) -> float:
    """q with P(|T| <= q) = confidence for Student's t with `df` whole degrees of freedom (the
    half-width of a `confidence` interval in standard errors)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence} is not in (0, 1)")
    miss = 1.0 - confidence
    low, high = 0.0, 1.0
    while float(t_pvalue(high, df)) > miss:
        high *= 2
    for _ in range(200):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if float(t_pvalue(middle, df)) > miss else (low, middle)
        if high - low <= 1e-13 * high:
            break
    return 0.5 * (low + high)


@dataclass(frozen=True)
class RoundChange:
    """A relative change from round-level log values: exp(mean) - 1, its interval and p-value
    (None below 2 rounds)."""

    change: float
    low: float | None
    high: float | None
    pvalue: float | None
    rounds: int
    spread: float | None = None
    """standard deviation of the round levels (logs, not calibrated); None below 2 rounds"""


def paired_change(base: Sequence[float], head: Sequence[float], rounds: Sequence[int],
                  confidence: float = CONFIDENCE) -> RoundChange:
    """The change of one paired result on its own (no job to calibrate it): `paired_changes` of one item."""
    return paired_changes([(base, head, rounds)], confidence=confidence)[0]


def _from_se(mean: float, se: float, n: int, confidence: float, spread: float | None = None) -> RoundChange:
    """The change exp(mean) - 1 of a mean of n round levels with standard error `se` (logs)."""
    if n < 2 or math.isnan(se):
        return RoundChange(math.expm1(mean), None, None, None, n)
    if se == 0:
        return RoundChange(math.expm1(mean), math.expm1(mean), math.expm1(mean), 1.0 if mean == 0 else 0.0, n,
                           spread)
    half = t_quantile(confidence, n - 1) * se
    pvalue = float(t_pvalue(abs(mean) / se, n - 1))
    return RoundChange(math.expm1(mean), math.expm1(mean - half), math.expm1(mean + half), pvalue, n, spread)


def provisional_threshold(threshold: float, spread: float | None, noise_factor: float) -> float:
    """The least |change| called different for a case whose noise is not learned yet (module doc):
    the threshold, or `noise_factor` x its rounds' spread (a relative change) where that is larger."""
    if spread is None or not math.isfinite(spread):
        return threshold
    return max(threshold, math.expm1(noise_factor * spread))


def classify(change: float, low: float, high: float, pvalue: float, threshold: float, max_pvalue: float,
             *, different_at: float | None = None) -> Answer:
    """The three-way verdict on a relative change with its interval and p-value (module doc):
    different, same or unknown, for the case's threshold (> 0); `different_at` (at least the
    threshold) raises the least change called different alone (`provisional_threshold`)."""
    if threshold <= 0:
        raise ValueError(f"a threshold must be positive, not {threshold}")
    significant = pvalue <= max_pvalue
    if significant and abs(change) >= max(threshold, different_at or 0.0):
        return "different"
    if -threshold <= low and high <= threshold and not (significant and abs(change) >= EVIDENT_SHARE * threshold):
        return "same"
    return "unknown"


@dataclass(frozen=True)
class DecisionRule:
    """What the agent decides a paired case against, round by round: the analysis's `max_pvalue` and
    each case's threshold (by case id; `default_threshold` for the others), as the service computes
    them from the case's learned noise (`CompareSettings`)."""

    max_pvalue: float = MAX_PVALUE
    default_threshold: float = PAIRED_MIN_CHANGE
    thresholds: Mapping[str, float] = field(default_factory=dict)
    noise_factor: float = NOISE_FACTOR

    def threshold(self, case: str) -> float:
        return self.thresholds.get(case, self.default_threshold)

    def different_at(self, case: str, change: RoundChange) -> float:
        """The least change called different: the threshold, provisional while the case's noise is not learned."""
        if case in self.thresholds:
            return self.thresholds[case]
        return provisional_threshold(self.default_threshold, change.spread, self.noise_factor)

    def answer(self, case: str, change: RoundChange) -> Answer:
        """`classify` of a change on the case's threshold; unknown below 2 rounds."""
        if change.low is None or change.high is None or change.pvalue is None:
            return "unknown"
        return classify(change.change, change.low, change.high, change.pvalue, self.threshold(case), self.max_pvalue,
                        different_at=self.different_at(case, change))

    def decided(self, case: str, change: RoundChange) -> str | None:
        """"decided: same" or "decided: different" (why a case needs no more rounds), or None. With a
        margin (`STOP_MARGIN`): the job's identical binaries go on calibrating every interval after a
        case stops, so an answer at the very edge when it stops could be on the other side of it when
        the analysis reads the whole job (an H200 A/A: one case stopped same at [-2.0, +2.0] % of a 2 %
        band was [-2.00, +2.01] % in the end: inconclusive)."""
        if change.low is None or change.high is None or change.pvalue is None:
            return None
        answer = classify(change.change, change.low, change.high, change.pvalue,
                          self.threshold(case) * STOP_MARGIN, self.max_pvalue * STOP_MARGIN)
        if answer == "different" and abs(change.change) < self.different_at(case, change):
            answer = "unknown"   # the margin narrows the band for "same" only: a change must still reach t
        return None if answer == "unknown" else f"decided: {answer}"


def level_halfwidth(samples: Sequence[float], rounds: Sequence[int], confidence: float = CONFIDENCE) -> float:
    """Half-width of the `confidence` interval of an unpaired result's level (the mean of its rounds'
    log levels), in logs: how precisely one run knows its own level; inf below 2 rounds."""
    levels, _ = round_values([(samples, rounds)])
    if len(levels) < 2:
        return math.inf
    return t_quantile(confidence, len(levels) - 1) * float(levels.std(ddof=1)) / math.sqrt(len(levels))


# ---- the paired estimate of a job's results, calibrated by its identical binaries --------------------
# (the analysis's `stats.paired_estimates` and the agent's stop rule read these same numbers)

PairedSamples = tuple[Samples, Samples, Sequence[int] | None]
"""(base samples, head samples, rounds): sample i of base and of head were timed back to back, in
the rounds given (None: `DEFAULT_BLOCKS` blocks)."""


def mean_var(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per item (values flat, counts per item): the mean (nan for none) and the sample variance
    (n - 1; nan for fewer than 2)."""
    item = np.repeat(np.arange(len(counts)), counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(item, weights=values, minlength=len(counts)) / counts
        deviation = values - mean[item]
        var = np.bincount(item, weights=deviation ** 2, minlength=len(counts)) / (counts - 1)
    var[counts < 2] = np.nan
    return mean, var


POOLED_MIN_ITEMS = 20
"""Fewest testable items of an unpaired comparison a run-level dispersion is pooled from."""
CHI2_1_MEDIAN = 0.454936423119572
"""The median of a chi-square variable with one degree of freedom: of z^2 for a standard normal z
(`scipy.stats.chi2.median(1)`, which agents do not install; a test holds the two equal)."""


PAIRED_DISPERSION_FLOOR = 0.5
"""The least a paired job's calibration by identical binaries may scale its variances (`paired_estimates`).
Below 1 the identical rows spread less than their rounds say, which with 20 to 80 of them happens by
chance as often as the opposite (its 5th percentile for a true 1: ~0.4 with 20 rows, 0.6 with 80); the
floor only keeps a degenerate median (half the rows' changes exactly 0) from making every test exact."""


def whole_f1_median(df: np.ndarray) -> np.ndarray:
    """The median of F(1, df) for whole df: the square of Student's t's 50 % two-sided quantile
    (F(1, df) is T^2)."""
    return np.array([t_quantile(0.5, int(v)) ** 2 for v in np.asarray(df).tolist()], dtype=float)


def run_dispersion(diffs: np.ndarray, variances: np.ndarray, min_items: int = POOLED_MIN_ITEMS,
                   df: np.ndarray | None = None, floor: float = 1.0,
                   f1_median: Callable[[np.ndarray], np.ndarray] | None = None) -> float | None:
    """How much more two runs differ than their rounds say, pooled over the items of one comparison
    (log differences and their rounds' variances): max(floor, median(z^2) / CHI2_1_MEDIAN), z = diff / sd;
    None with fewer than `min_items` items with a variance. The floor of 1 says runs differ at least
    as much as their rounds (the unpaired pool, where real changes may be among the items); a paired
    job's identical binaries take a lower one (`PAIRED_DISPERSION_FLOOR`). With `df` (each variance's degrees of
    freedom: it is estimated from a few rounds), z is Student's t, not normal: each z^2 is divided
    by the median of F(1, df) instead (median(z^2) / CHI2_1_MEDIAN is ~10 % too large with 5 rounds a
    side, and the tests a little conservative), which makes half the items' z^2 / dispersion fall
    under their own F median (`f1_median`: by default through Student's t, for whole df).

    The rounds of one run cannot see what a whole run shares (its placement, clocks, load), and a
    fresh series has no history to say. But the items of one comparison were timed by the same two
    runs: on identical code their z would be standard normal if the rounds told everything, so the
    median of z^2 says by how much they do not (a quasi-likelihood dispersion). The median ignores
    real changes up to half of the items; more than that makes the tests conservative, not bold.
    An H100 unpaired A/A of the suite (docs/benchmarks/history.md, issue 11): 2.9; the p-values uniform with it
    (suite cases' KS p 0.40), piled at 1 with the 3 % run noise assumed before (KS p 1e-35).
    """
    usable = np.isfinite(diffs) & np.isfinite(variances) & (variances > 0)
    if df is not None:
        usable &= np.isfinite(df) & (df > 0)
    if int(usable.sum()) < min_items:
        return None
    z2 = np.square(diffs[usable]) / variances[usable]
    medians = (f1_median or whole_f1_median)(df[usable]) if df is not None else CHI2_1_MEDIAN
    return max(floor, float(np.median(z2 / medians)))


def per_group(estimate: Callable[..., float | None], diffs: np.ndarray, variances: np.ndarray, df: np.ndarray,
               groups: Sequence[str] | None, *, pool: np.ndarray | None, min_items: int) -> np.ndarray:
    """Per item: `estimate` over its group when the group is large enough, else over all items; nan
    where neither is (too few items). Only items in `pool` (None: all) are estimated from; the
    result applies to every item."""
    pool = np.ones(diffs.size, dtype=bool) if pool is None else pool
    overall = estimate(diffs[pool], variances[pool], min_items, df=df[pool])
    out = np.full(diffs.size, np.nan if overall is None else overall)
    if groups is None:
        return out
    if len(groups) != diffs.size:
        raise ValueError(f"{len(groups)} groups for {diffs.size} comparisons")
    labels = np.asarray(groups, dtype=object)
    for label in set(groups):
        members = labels == label
        own = estimate(diffs[members & pool], variances[members & pool], min_items, df=df[members & pool])
        if own is not None:
            out[members] = own
    return out


def paired_levels(items: Sequence[PairedSamples], *, calibration: Sequence[bool] | None = None,
                  groups: Sequence[str] | None = None, blocks: int = DEFAULT_BLOCKS
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per paired item, in logs: the mean of its rounds' levels (each round's middle-fifth mean of
    log(head_i / base_i)), its standard error, its number of rounds and the rounds' standard deviation
    (nan below 2); the standard error scaled by the job's identical binaries (`calibration`, by
    `groups`) as `stats.paired_estimates` says.
    Raises ValueError when base and head differ in length or the rounds do not add up."""
    ratios: list[tuple[Sequence[float], Sequence[int] | None]] = []
    for base, head, rounds in items:
        if len(base) != len(head):
            raise ValueError(f"paired samples differ in length: {len(base)} base, {len(head)} head")
        ratios.append((np.asarray(head, dtype=float) / np.asarray(base, dtype=float), rounds))
    logs, counts = round_values(ratios, blocks, "log")
    mean, var = mean_var(logs, counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.sqrt(var / counts)
        if calibration is not None:
            if len(calibration) != len(items):
                raise ValueError(f"{len(calibration)} calibration marks for {len(items)} comparisons")
            dispersion = per_group(partial(run_dispersion, floor=PAIRED_DISPERSION_FLOOR), mean, var / counts,
                                   (counts - 1).astype(float), groups, pool=np.asarray(calibration, dtype=bool),
                                   min_items=POOLED_MIN_ITEMS)
            se = np.where(np.isnan(dispersion), se, se * np.sqrt(dispersion))
    return mean, se, counts, np.sqrt(var)


def paired_changes(items: Sequence[PairedSamples], *, calibration: Sequence[bool] | None = None,
                   groups: Sequence[str] | None = None, confidence: float = CONFIDENCE) -> list[RoundChange]:
    """`paired_levels` as changes with their interval and p-value (Student's t over each item's
    rounds); an item with no samples raises, one with fewer than 2 rounds has no interval."""
    mean, se, counts, spread = paired_levels(items, calibration=calibration, groups=groups)
    out = []
    for m, s, n, sd in zip(mean.tolist(), se.tolist(), counts.tolist(), spread.tolist(), strict=True):
        if n == 0:
            raise ValueError("no rounds")
        out.append(_from_se(m, s, n, confidence, None if math.isnan(sd) else sd))
    return out
