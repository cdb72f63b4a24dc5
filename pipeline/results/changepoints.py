"""Change points in a series' history: pure functions over per-commit values, no database.

The input is one value per commit on the default branch, oldest first (the per-commit median of
the samples: see `stats.py` for why the median). The output is a list of `ChangePoint`: the index
of the first commit of the new level, the mean level on each side, the relative change and the
p-value of the test that accepted it. The commit range of a change point is
(`values[index - 1]`'s commit, `values[index]`'s commit]: the caller maps indices to commits.

Algorithm (`detect`), after Apache Otava's "split then merge" (Fleming et al., "Hunter: Using
Change Point Detection to Hunt for Performance Regressions", ICPE 2023), itself E-Divisive means
(Matteson and James 2014) with a t-test in place of permutations:

1. Despike: a value that differs from the median of itself and its two neighbours by more than
   `outlier_k` robust standard deviations is replaced by that median (a Hampel filter of width 3).
   One slow run is not a change of level; a step survives, since at a step the median of three
   keeps the edge. The robust standard deviation is 1.4826 * MAD of the first differences / sqrt(2),
   which steps and isolated outliers barely move. The first and last values are left alone.
2. Split: sliding windows of `window` commits, half a window apart. In each window, binary
   segmentation: the split that maximises the E-Divisive energy statistic (L1 distances, both
   sides at least `min_size` long) is kept when a pooled two-sample t-test between its two sides
   gives a p-value under a relaxed threshold (`SPLIT_PVALUE_FACTOR * max_pvalue`); both sides are
   then split again. The union over windows are the candidate ("weak") change points.
3. Merge: each candidate is tested between its neighbours, each side cut to at most `window`
   commits next to it: the pooled t-test, and, where the `window` commits on each side show a
   significant linear trend, also a test of the step beyond that trend (the p-value is the larger
   of the two). While a candidate fails (p-value above `max_pvalue`, |relative change| under
   `min_magnitude`, or a side shorter than `min_size`), the weakest one is removed and its
   neighbours are tested again. Two candidates closer than `min_size` are never both kept.

`min_size` is the number of commits of the new level needed before a change point is reported
(Dana's "required" confirmations): with the default 3 a step is reported once the third commit at
its new level has results, two commits after the step, and a lone pair of slow commits at the end
of the history is not yet a change. While the last level is young (under `2 * min_size` commits)
its first commit must also be nearer the new mean than the old one, so that a split one commit
early (an old commit and two new ones) does not stand in for the real step.

Assumptions: values are finite; noise between commits is independent and roughly normal within a
level (the t-test); a level lasts at least `min_size` commits. Levels shorter than that (a one- or
two-commit blip) are not reported. A slow drift (a significant linear trend with no step beyond
it) is mostly not reported: it has no culprit commit, and cutting it into steps would raise one
false alarm per window; a trend alarm is a separate matter.

Incremental use (`detect_new`): a change point with `2 * window` commits after it can no longer
move (every window and merge test around it is complete), so only the tail after the last settled
change point (at most `3 * window` commits) is analysed again when commits arrive: the cost per new
commit is bounded, independent of the history's length.

Cost: O(window^2) per window for the energy statistic, O(n / window) windows, so O(n * window).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.special import stdtr

WINDOW = 50
"""Commits per analysis window (Otava's default)."""
MAX_PVALUE = 0.001
"""Largest p-value of a reported change point (Otava's default)."""
MIN_MAGNITUDE = 0.0
"""Smallest |relative change| of a reported change point; set per series."""
MIN_SIZE = 3
"""Commits on each side of a change point, the new level included, before it is reported."""
OUTLIER_K = 4.0
"""Despike threshold in robust standard deviations."""
SPLIT_PVALUE_FACTOR = 10.0
"""The split step accepts candidates at this multiple of `max_pvalue` (Otava uses 10)."""

Classification = Literal["regression", "improvement"]


@dataclass(frozen=True)
class ChangePoint:
    index: int
    """First commit (position in `values`) of the new level."""
    before_mean: float
    after_mean: float
    magnitude: float
    """after_mean / before_mean - 1 (relative change; signed)."""
    pvalue: float


def classify(cp: ChangePoint, lower_is_better: bool) -> Classification:
    """A rise is a regression when lower is better (latency), an improvement otherwise (throughput)."""
    rose = cp.magnitude > 0
    return "regression" if rose == lower_is_better else "improvement"


def robust_sigma(values: Sequence[float]) -> float:
    """Noise standard deviation from the median absolute first difference (normal noise assumed).

    Steps and isolated outliers touch few differences, so they barely move it. 0.0 for fewer than
    two values or a constant series.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return 0.0
    d = np.diff(x)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2.0))


def despike(values: Sequence[float], *, outlier_k: float = OUTLIER_K) -> np.ndarray:
    """Replace isolated outliers by the median of the value and its two neighbours (see module doc)."""
    x = np.asarray(values, dtype=np.float64).copy()
    if x.size < 3:
        return x
    sigma = robust_sigma(x)
    med3 = np.median(np.stack([x[:-2], x[1:-1], x[2:]]), axis=0)
    inner = x[1:-1]
    spike = np.abs(inner - med3) > outlier_k * sigma
    if sigma == 0.0:
        spike = inner != med3
    inner[spike] = med3[spike]
    return x


def _ttest(left: np.ndarray, right: np.ndarray) -> float:
    """Two-sided pooled-variance (Student) t-test p-value; 1.0 where undefined.

    Pooled, as in Otava: a handful of commits at a new level borrow the variance estimate of the
    long old level, which is what lets a 3-commit confirmation reach p < 0.001 for a step of three
    noise standard deviations. Despiking beforehand protects it from single outliers.
    """
    if left.size < 1 or right.size < 1 or left.size + right.size < 3:
        return 1.0
    if np.ptp(left) == 0 and np.ptp(right) == 0:
        return 1.0 if left[0] == right[0] else 0.0
    p = _pooled_ttest_pvalue(left, right)
    return 1.0 if math.isnan(p) else p


def _pooled_ttest_pvalue(left: np.ndarray, right: np.ndarray) -> float:
    """`scipy.stats.ttest_ind(left, right, equal_var=True).pvalue`, same arithmetic in the same
    order (population variance of the demeaned values times n / (n - 1), pooled; Student's t
    survival function `stdtr`), without the wrapper's input checks: ~50 times faster, which
    matters since analysis runs this thousands of times per uploaded document."""
    n1, n2 = left.size, right.size
    m1, m2 = left.mean(), right.mean()
    v1 = float(np.mean((left - m1) ** 2)) * (n1 / (n1 - 1)) if n1 > 1 else 0.0
    v2 = float(np.mean((right - m2) ** 2)) * (n2 / (n2 - 1)) if n2 > 1 else 0.0
    df = n1 + n2 - 2.0
    denom = math.sqrt(((n1 - 1) * v1 + (n2 - 1) * v2) / df * (1.0 / n1 + 1.0 / n2))
    if denom == 0.0:
        return math.nan
    t = float(m1 - m2) / denom
    return 2 * float(stdtr(df, -abs(t)))


def _step_beyond_trend(left: np.ndarray, right: np.ndarray, max_pvalue: float) -> float:
    """P-value of a step between left and right once a shared linear trend is allowed for.

    Fits y = a + b * i + s * [i >= len(left)] by least squares. When the trend b is not
    significant (p > max_pvalue) the series has no drift to explain the shift and 0.0 is returned
    (the mean-shift t-test alone decides); otherwise the two-sided p-value of s. A slow drift has a
    significant trend and no step beyond it, so it is not cut into many change points; a step has
    no trend within its levels, so it keeps the full power of the mean-shift test.
    """
    y = np.concatenate([left, right])
    n = y.size
    if n < 6:
        return 0.0
    i = np.arange(n, dtype=np.float64) - left.size
    design = np.column_stack([np.ones(n), i, (i >= 0).astype(np.float64)])
    coef, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
    if rank < 3:
        return 0.0
    resid = y - design @ coef
    dof = n - 3
    s2 = float(resid @ resid) / dof
    if s2 == 0.0:
        return 0.0
    cov = s2 * np.linalg.inv(design.T @ design)
    p_trend = 2 * float(stdtr(dof, -abs(coef[1]) / math.sqrt(cov[1, 1])))  # = student_t.sf(|t|, dof)
    if p_trend > max_pvalue:
        return 0.0
    return 2 * float(stdtr(dof, -abs(coef[2]) / math.sqrt(cov[2, 2])))


def _best_split(x: np.ndarray, min_size: int) -> int | None:
    """Split of x maximising the E-Divisive energy statistic (power 1), sides >= min_size."""
    n = x.size
    if n < 2 * min_size:
        return None
    d = np.abs(x[:, None] - x[None, :])
    p = np.zeros((n + 1, n + 1))
    p[1:, 1:] = d.cumsum(0).cumsum(1)

    def block(a: int, b: int, c: int, e: int) -> float:  # sum of d[a:b, c:e]
        return p[b, e] - p[a, e] - p[b, c] + p[a, c]

    best, best_q = None, -math.inf
    for tau in range(min_size, n - min_size + 1):
        m, k = tau, n - tau
        between = block(0, tau, tau, n) / (m * k)
        within_l = block(0, tau, 0, tau) / (m * (m - 1))
        within_r = block(tau, n, tau, n) / (k * (k - 1))
        q = m * k / n * (2 * between - within_l - within_r)
        if q > best_q:
            best, best_q = tau, q
    return best


def _split(y: np.ndarray, a: int, b: int, pvalue: float, min_size: int, out: set[int]) -> None:
    tau = _best_split(y[a:b], min_size)
    if tau is None:
        return
    tau += a
    if _ttest(y[a:tau], y[tau:b]) > pvalue:
        return
    out.add(tau)
    _split(y, a, tau, pvalue, min_size, out)
    _split(y, tau, b, pvalue, min_size, out)


def _stats(y: np.ndarray, cps: list[int], i: int, window: int, min_size: int, max_pvalue: float) -> ChangePoint:
    """Test cps[i] between its neighbours; neighbours closer than min_size are looked through.

    The p-value is the larger of the mean-shift t-test (between the neighbours) and the
    step-beyond-trend test (over `window` commits each side, whatever lies between).
    """
    c = cps[i]
    lo = max((q for q in cps[:i] if c - q >= min_size), default=0)
    hi = min((q for q in cps[i + 1 :] if q - c >= min_size), default=y.size)
    left, right = y[max(lo, c - window) : c], y[c : min(hi, c + window)]
    before = float(left.mean()) if left.size else math.nan
    after = float(right.mean()) if right.size else math.nan
    short = left.size < min_size or right.size < min_size
    # A young last level (fewer than 2 * min_size commits, at the end of the history) must begin
    # with a commit that looks like it: otherwise `min_size` would let a split one commit early,
    # [old, new, new], stand for a step whose new level has only two commits so far.
    young = hi == y.size and right.size < 2 * min_size
    if young and not short and abs(right[0] - after) >= abs(right[0] - before):
        short = True
    if short:
        pvalue = 1.0
    else:
        # The trend is judged over the whole window around c, looking through other candidates:
        # a drift cut into short pieces shows no trend within any one piece.
        wide_l, wide_r = y[max(0, c - window) : c], y[c : c + window]
        pvalue = max(_ttest(left, right), _step_beyond_trend(wide_l, wide_r, max_pvalue))
    magnitude = after / before - 1.0 if before else math.inf
    return ChangePoint(index=c, before_mean=before, after_mean=after, magnitude=magnitude, pvalue=pvalue)


def detect(
    values: Sequence[float],
    *,
    window: int = WINDOW,
    max_pvalue: float = MAX_PVALUE,
    min_magnitude: float = MIN_MAGNITUDE,
    min_size: int = MIN_SIZE,
    outlier_k: float = OUTLIER_K,
) -> list[ChangePoint]:
    """Change points of a per-commit series, oldest first (algorithm and assumptions: module doc).

    Raises ValueError for non-finite values, `window < 2 * min_size` or `min_size < 2`.
    """
    if min_size < 2 or window < 2 * min_size:
        raise ValueError(f"need min_size >= 2 and window >= 2 * min_size, got {min_size=}, {window=}")
    y = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError("values must be finite")
    return _detect(despike(y, outlier_k=outlier_k), window, max_pvalue, min_magnitude, min_size)


def _detect(y: np.ndarray, window: int, max_pvalue: float, min_magnitude: float, min_size: int) -> list[ChangePoint]:
    """Split and merge on despiked values."""
    n = y.size
    if n < 2 * min_size:
        return []
    # Split: binary E-Divisive segmentation in sliding windows, relaxed threshold.
    weak: set[int] = set()
    split_pvalue = min(1.0, SPLIT_PVALUE_FACTOR * max_pvalue)
    step = max(1, window // 2)
    starts = list(range(0, max(n - window, 0) + 1, step))
    if starts[-1] + window < n:
        starts.append(n - window)
    for s in starts:
        _split(y, s, min(n, s + window), split_pvalue, min_size, weak)

    # Merge: drop the weakest failing candidate until all pass.
    cps = sorted(weak)
    while cps:
        stats = [_stats(y, cps, i, window, min_size, max_pvalue) for i in range(len(cps))]
        failing = [
            i for i, st in enumerate(stats) if st.pvalue > max_pvalue or abs(st.magnitude) < min_magnitude
        ]
        if not failing:
            crowded = [i for i in range(len(cps) - 1) if cps[i + 1] - cps[i] < min_size]
            if not crowded:
                return stats
            # Of the closest pair, keep the stronger one.
            j = min(crowded, key=lambda i: cps[i + 1] - cps[i])
            failing = [j, j + 1]
        worst = max(failing, key=lambda i: (stats[i].pvalue, -abs(stats[i].magnitude)))
        del cps[worst]
    return []


def detect_new(
    values: Sequence[float],
    known: Sequence[ChangePoint],
    *,
    window: int = WINDOW,
    max_pvalue: float = MAX_PVALUE,
    min_magnitude: float = MIN_MAGNITUDE,
    min_size: int = MIN_SIZE,
    outlier_k: float = OUTLIER_K,
) -> list[ChangePoint]:
    """`detect` for a history that grew since `known` was computed, re-analysing only its tail.

    Change points in `known` with at least `2 * window` commits after them are settled and kept as
    they are; the values from the last settled change point (or from `3 * window` commits before
    the end, whichever is later) are analysed again with `detect`. The result equals `detect` on
    the whole history except where a window boundary falls differently (the tail's windows start at
    its first commit) or where the tail's first segment is shorter than a window; pass the whole
    previous result as `known` each time.
    """
    if min_size < 2 or window < 2 * min_size:
        raise ValueError(f"need min_size >= 2 and window >= 2 * min_size, got {min_size=}, {window=}")
    y = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError("values must be finite")
    n = y.size
    settled = [cp for cp in known if cp.index < n - 2 * window]
    start = max(settled[-1].index if settled else 0, n - 3 * window, 0)
    # Despike with one commit of context before the tail, so its first value is filtered too.
    context = 1 if start > 0 else 0
    tail = _detect(despike(y[start - context :], outlier_k=outlier_k)[context:], window, max_pvalue, min_magnitude, min_size)
    last = settled[-1].index if settled else -1
    shifted = [
        ChangePoint(cp.index + start, cp.before_mean, cp.after_mean, cp.magnitude, cp.pvalue)
        for cp in tail
    ]
    return list(settled) + [cp for cp in shifted if cp.index - last >= min_size]


def dana_running_average(values: Sequence[float], *, range_: float = 0.05, required: int = 2) -> list[int]:
    """Dana's segmentation (the baseline): indices where a new segment starts.

    A running average is kept per segment. A value more than `range_` (relative) away from it opens
    a new segment at its index only if the next `required` values are also more than `range_` away
    on the same side; otherwise the value is left out of the average (an unconfirmed outlier). A new segment's
    average starts from its first `required + 1` values. The first segment starts at 0 (not
    reported). Assumes positive values.
    """
    x = [float(v) for v in values]
    starts: list[int] = []
    total, count = 0.0, 0
    i = 0
    while i < len(x):
        if count == 0:
            total, count = x[i], 1
            i += 1
            continue
        avg = total / count
        side = _side(x[i], avg, range_)
        if side != 0:
            following = x[i + 1 : i + 1 + required]
            if len(following) == required and all(_side(v, avg, range_) == side for v in following):
                starts.append(i)
                group = x[i : i + 1 + required]
                total, count = sum(group), len(group)
                i += 1 + required
                continue
            i += 1
            continue
        total += x[i]
        count += 1
        i += 1
    return starts


def _side(value: float, avg: float, range_: float) -> int:
    if value > avg * (1 + range_):
        return 1
    if value < avg * (1 - range_):
        return -1
    return 0
