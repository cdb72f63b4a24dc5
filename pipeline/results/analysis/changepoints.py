"""Change points in a series' history: pure functions over per-commit values (one per commit on
the default branch, oldest first), no database. docs/design.md, "Change-point detection", has the
algorithm, the confirmation rule and why; in short:
- `detect`: after Apache Otava's split and merge (E-Divisive means with a t-test): outlier runs
  left out (`outlier_runs`), candidates split in sliding windows on the history's grid, merged
  until every one passes its tests between its neighbours, a ramp kept as one point;
- `analyse`: `detect`'s points that have `confirm_size` commits from them and a p-value of at most
  `confirm_pvalue` are confirmed, the others suspected, with the newest commits' departure from
  the level before them (`suspect`) and the outlier runs;
- `holds`: the hysteresis the store applies to a point it confirmed earlier.
A change point is the index of the first commit of the new level and of the last one of the old
(`previous`): the culprit lies in (`previous`'s commit, `index`'s commit]. Window splits, block
noise and candidate tests are remembered by a digest of their values (`_remembered`): the store
analyses the newest 200 commits of a history after each upload, whose older windows did not
change. The memo changes no answer.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import numpy as np
from scipy.special import stdtr

from pipeline.config import AnalysisSettings

_DEFAULTS = AnalysisSettings()
"""The functions' defaults are the settings' (`pipeline.config.AnalysisSettings`), defined there once."""
WINDOW: int = _DEFAULTS.window
"""Commits per analysis window (Otava's default, 50)."""
MAX_PVALUE: float = _DEFAULTS.max_pvalue
"""Largest p-value of a reported change point (Otava's default, 0.001)."""
MIN_MAGNITUDE: float = _DEFAULTS.min_magnitude
"""Smallest |relative change| of a reported change point, unless the series sets its own."""
MIN_SIZE: int = _DEFAULTS.min_size
"""Commits on each side of a change point, the new level included, before `detect` reports it."""
CONFIRM_SIZE: int = _DEFAULTS.confirm_size
"""Commits from a change point to the newest, its own included, before it is confirmed."""
CONFIRM_PVALUE: float = _DEFAULTS.confirm_pvalue
"""Largest p-value of a confirmed change point (docs/design.md, "Change-point detection")."""
HOLD_PVALUE: float = _DEFAULTS.hold_pvalue
"""A confirmed change point stands while its level still differs at this p-value (`holds`)."""
OUTLIER_K = 4.0
"""Outlier-run threshold in robust standard deviations."""
MEMO_SIZE = 250_000
"""Answers `_remembered` keeps (window splits, block noise, candidate tests; about 300 bytes each)."""
SPLIT_PVALUE_FACTOR = 10.0
"""The split step accepts candidates at this multiple of `max_pvalue` (Otava uses 10)."""

TREND_SPANS = (1, 2)
"""The step-beyond-trend test runs over this many windows on each side of a candidate, each; the
candidate must pass every one: one window sees a drift that bends (a ramp between two flat
stretches), two windows a slow drift whose rise is within the noise of one."""
STEPS_BIC_MARGIN = 6.0
"""How much lower the BIC of the steps model must be than the trend-with-step model's for the
steps to count as the better explanation (6: "strong" evidence on Kass and Raftery's scale)."""

Classification = Literal["regression", "improvement"]
T = TypeVar("T")


@dataclass(frozen=True)
class ChangePoint:
    index: int
    """First commit (position in `values`) of the new level."""
    before_mean: float
    after_mean: float
    magnitude: float
    """after_mean / before_mean - 1 (relative change; signed)."""
    pvalue: float
    previous: int = -1
    """Last commit of the old level; -1: `index - 1`. Earlier when the commits between were
    outlier runs: the culprit is one of previous + 1 .. index."""

    @property
    def last_before(self) -> int:
        return self.index - 1 if self.previous < 0 else self.previous


@dataclass(frozen=True)
class Analysis:
    """What `analyse` finds in a history."""

    confirmed: list[ChangePoint]
    suspected: ChangePoint | None
    """The newest commits' departure from their level, when `confirmed` does not hold it yet."""
    outliers: list[int] = field(default_factory=list)
    """Commits whose run was left out of the tests as an outlier (`outlier_runs`)."""
    pending: list[ChangePoint] = field(default_factory=list)
    """Points `detect` reports that the confirmation rule does not confirm (yet): suspected."""


def classify(cp: ChangePoint, lower_is_better: bool) -> Classification:
    """A rise is a regression when lower is better (latency), an improvement otherwise (throughput)."""
    rose = cp.magnitude > 0
    return "regression" if rose == lower_is_better else "improvement"


def robust_sigma(values: Sequence[float] | np.ndarray) -> float:
    """Noise standard deviation from the median absolute first difference (normal noise assumed).

    Steps and isolated outliers touch few differences, so they barely move it. 0.0 for fewer than
    two values or a constant series.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return 0.0
    d = np.diff(x)
    return float(1.4826 * _median(np.abs(d - _median(d))) / math.sqrt(2.0))


def _mean(x: np.ndarray) -> float:
    """`x.mean()` of a 1-D float array, the same number (numpy's sum divided by the count), at a
    third of its cost: the merge's tests take a few hundred means per history."""
    return float(np.add.reduce(x)) / x.size


def _median(x: np.ndarray) -> float:
    """`np.median` of a 1-D array, the same number (the middle value, or the mean of the middle
    two), without its generic machinery: the outlier mask takes two per block of every history."""
    ordered = np.sort(x)
    half = ordered.size // 2
    if ordered.size % 2:
        return float(ordered[half])
    return float((ordered[half - 1] + ordered[half]) / 2)


def _local_sigma(x: np.ndarray, window: int) -> np.ndarray:
    """Per commit: `robust_sigma` over the `window` commits around its block of `window // 2`."""
    step = max(1, window // 2)
    out = np.empty(x.size)
    for lo in range(0, x.size, step):
        block = x[max(0, lo - step // 2): lo + step + step // 2 + 1]
        out[lo:lo + step] = _remembered("sigma", block, (), lambda: robust_sigma(block))
    return out


_MEMO: dict[tuple[object, ...], object] = {}


def _remembered(kind: str, values: np.ndarray, arguments: tuple[object, ...], compute: Callable[[], T]) -> T:
    """`compute()`, a pure function of `values` and `arguments`, remembered by a digest of the values:
    the store analyses the newest 200 commits of a history after each upload, whose older windows
    and blocks hold the same values as at the previous upload. At most
    `MEMO_SIZE` answers are kept (then all are dropped: the next uploads fill it again)."""
    key = (kind, hashlib.blake2b(values.tobytes(), digest_size=16).digest(), values.size, *arguments)
    found = _MEMO.get(key)
    if found is None:
        if len(_MEMO) >= MEMO_SIZE:
            _MEMO.clear()
        found = _MEMO[key] = compute()
    return found  # type: ignore[return-value]  # stored by this function with the kind's type


def outlier_runs(values: Sequence[float] | np.ndarray, *, outlier_k: float = OUTLIER_K, window: int = WINDOW) -> np.ndarray:
    """Mask of the commits whose run is an outlier (docs/design.md, "Change-point detection", step
    1); values untouched.

    A commit is flagged when it is more than `outlier_k` local robust standard deviations from the
    median of the five commits centred on it (three next to either end): five, so that two slow
    runs in a row, or a normal run between two slow ones, are judged against the level around
    them and not against each other; and as far from the median of the (up to) three commits on
    either side of it: one that fits the level before it or the level after it is kept. The first
    and the newest commits are never flagged.

    Positive histories are judged in log space: a run's noise is proportional to its level, so
    after a 20x slowdown the new level's spread is 20x the old one's, and the old level's first
    differences (which set sigma) made the first commit of the new level look like an outlier.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size and np.all(x > 0):
        x = np.log(x)
    n = x.size
    flagged = np.zeros(n, dtype=bool)
    if n < 3:
        return flagged
    sigma = _local_sigma(x, window)
    centre = np.empty(n)
    if n >= 5:
        # the median of five: the middle one of each column (np.median's number, without its checks)
        centre[2:-2] = np.partition(np.stack([x[:-4], x[1:-3], x[2:-2], x[3:-1], x[4:]]), 2, axis=0)[2]
    for i in (1, n - 2):
        centre[i] = _median(x[i - 1 : i + 2])
    inner = slice(1, n - 1)
    limit = outlier_k * sigma[inner]
    far = _beyond(np.abs(x[inner] - centre[inner]), limit)
    # A run that fits the level on one side of it is that level's, whatever the five around it say:
    # next to a step, a slow run on the same side makes the five's median the slow run, and the last
    # commit of the old level looked like the outlier (12, 12, 18, 12 | 53, 53, 53, 53 lost its step).
    for i in (np.flatnonzero(far) + 1).tolist():
        sides = (x[max(0, i - 3):i], x[i + 1:i + 4])
        if any(abs(x[i] - _median(side)) <= outlier_k * sigma[i] for side in sides if side.size):
            far[i - 1] = False
    flagged[inner] = far
    return flagged


def _beyond(distance: np.ndarray, limit: np.ndarray) -> np.ndarray:
    return np.where(limit > 0, distance > limit, distance > 0)


def _ttest(left: np.ndarray, right: np.ndarray) -> float:
    """Two-sided pooled-variance (Student) t-test p-value; 1.0 where undefined.

    Pooled, as in Otava: a handful of commits at a new level borrow the variance estimate of the
    long old level, which is what lets a 3-commit confirmation reach p < 0.001 for a step of three
    noise standard deviations. Outlier runs are left out beforehand, and a young level must hold
    with any one of its commits left out (`_stats`), so that one wild run cannot carry it.
    """
    if left.size < 1 or right.size < 1 or left.size + right.size < 3:
        return 1.0
    if left.max() == left.min() and right.max() == right.min():
        return 1.0 if left[0] == right[0] else 0.0
    p = _pooled_ttest_pvalue(left, right)
    return 1.0 if math.isnan(p) else p


def _pooled_ttest_pvalue(left: np.ndarray, right: np.ndarray) -> float:
    """`scipy.stats.ttest_ind(left, right, equal_var=True).pvalue`, same arithmetic in the same
    order (population variance of the demeaned values times n / (n - 1), pooled; Student's t
    survival function `stdtr`), without the wrapper's input checks: ~50 times faster, which
    matters since analysis runs this thousands of times per uploaded document."""
    n1, n2 = left.size, right.size
    m1, m2 = _mean(left), _mean(right)
    v1 = _mean((left - m1) ** 2) * (n1 / (n1 - 1)) if n1 > 1 else 0.0
    v2 = _mean((right - m2) ** 2) * (n2 / (n2 - 1)) if n2 > 1 else 0.0
    df = n1 + n2 - 2.0
    denom = math.sqrt(((n1 - 1) * v1 + (n2 - 1) * v2) / df * (1.0 / n1 + 1.0 / n2))
    if denom == 0.0:
        return math.nan
    t = (m1 - m2) / denom
    return 2 * float(stdtr(df, -abs(t)))


def _least_squares(design: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float, np.ndarray] | None:
    """(coefficients, residual variance, their covariance); None when the fit is degenerate.

    By the normal equations, whose inverse the covariance needs anyway (a third of `lstsq`'s cost,
    and this runs for every candidate tested): the one design fitted here, level, trend and a step
    with commits on both sides, has full rank and is well conditioned."""
    dof = y.size - design.shape[1]
    if dof < 3:
        return None
    try:
        inverse = np.linalg.inv(design.T @ design)
    except np.linalg.LinAlgError:
        return None
    coef = inverse @ (design.T @ y)
    resid = y - design @ coef
    s2 = float(resid @ resid) / dof
    if s2 == 0.0:
        return None
    return coef, s2, s2 * inverse


def _bic(y: np.ndarray, design: np.ndarray) -> float:
    """Bayesian information criterion of a least-squares fit (Gaussian noise)."""
    coef, _, _, _ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ coef
    rss = max(float(resid @ resid), 1e-300)
    parameters: int = design.shape[1]
    return y.size * math.log(rss / y.size) + parameters * math.log(y.size)


def _step_beyond_trend(y: np.ndarray, at: int, others: Sequence[int], max_pvalue: float) -> float:
    """P-value of a step at position `at` of y once a shared linear trend is allowed for.

    Three least-squares models of y compete by BIC: steps (a level, the step at `at` and steps at
    the `others`, the other candidates inside y), a trend (y = a + b * i) and a trend with the step
    (y = a + b * i + s * [i >= at]). When the steps explain y best there is no drift to explain the
    shift and 0.0 is returned (the mean-shift t-test alone decides); otherwise the two-sided
    p-value of s in the trend-with-step model. A slow drift is fitted better by a line than by the
    few steps it could be cut into, and has no step beyond the line, so it is not cut into many
    change points; a step, or a staircase of them, is fitted best by steps and keeps the full power
    of the mean-shift test.
    """
    n = y.size
    if n < 8:
        return 0.0
    i = np.arange(n, dtype=np.float64) - at
    one, step = np.ones(n), (i >= 0).astype(np.float64)
    with_step = np.column_stack([one, i, step])
    fit = _least_squares(with_step, y)
    if fit is None:
        return 0.0
    coef, _, cov = fit
    if 2 * float(stdtr(n - 3, -abs(coef[1]) / math.sqrt(cov[1, 1]))) > max_pvalue:
        return 0.0
    steps = [(np.arange(n) >= o).astype(np.float64) for o in others if 0 < o < n and o != at]
    if steps and _bic(y, np.column_stack([one, step, *steps])) + STEPS_BIC_MARGIN <= _bic(y, with_step):
        return 0.0
    return 2 * float(stdtr(n - 3, -abs(coef[2]) / math.sqrt(cov[2, 2])))  # = student_t.sf(|t|, dof) * 2


def _best_split(x: np.ndarray, min_size: int) -> int | None:
    """Split of x maximising the E-Divisive energy statistic (power 1), sides >= min_size.

    Every candidate split at once, each term in the order a loop over them would add it (so the
    statistic, and hence the argmax, is the same to the last bit); the first of equal maxima wins."""
    n = x.size
    if n < 2 * min_size:
        return None
    d = np.abs(x[:, None] - x[None, :])
    p = np.zeros((n + 1, n + 1))
    p[1:, 1:] = d.cumsum(0).cumsum(1)
    tau = np.arange(min_size, n - min_size + 1)
    m, k = tau, n - tau
    # sums of d over [0, tau) x [tau, n), [0, tau)^2 and [tau, n)^2 from the 2-D prefix sums
    between = (p[tau, n] - p[0, n] - p[tau, tau] + p[0, tau]) / (m * k)
    within_l = (p[tau, tau] - p[0, tau] - p[tau, 0] + p[0, 0]) / (m * (m - 1))
    within_r = (p[n, n] - p[tau, n] - p[n, tau] + p[tau, tau]) / (k * (k - 1))
    q = m * k / n * (2 * between - within_l - within_r)
    return int(tau[int(np.argmax(q))])


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


def _window_splits(y: np.ndarray, pvalue: float, min_size: int) -> tuple[int, ...]:
    """`_split` of one window's values, positions relative to it."""
    out: set[int] = set()
    _split(y, 0, y.size, pvalue, min_size, out)
    return tuple(sorted(out))


def _young_level_holds(left: np.ndarray, right: np.ndarray, max_pvalue: float, min_magnitude: float) -> bool:
    """A young last level is supported by each of its commits (`detect`): every one nearer the
    new mean than the old, and the test and the magnitude still pass with any one left out."""
    before, after = _mean(left), _mean(right)
    if np.any(np.abs(right - after) >= np.abs(right - before)):
        return False
    for j in range(right.size):
        rest = np.delete(right, j)
        rest_mean = _mean(rest)
        magnitude = rest_mean / before - 1.0 if before else math.inf
        if (rest_mean - before) * (after - before) <= 0 or abs(magnitude) < min_magnitude:
            return False
        if _ttest(left, rest) > max_pvalue:
            return False
    return True


def _stats(y: np.ndarray, cps: list[int], i: int, window: int, min_size: int, max_pvalue: float,
           min_magnitude: float) -> ChangePoint:
    """Test cps[i] between its neighbours; neighbours closer than min_size are looked through.

    The p-value is the larger of the mean-shift t-test (between the neighbours) and the
    step-beyond-trend test (over `window` commits each side, whatever lies between).
    """
    c = cps[i]
    lo = max((q for q in cps[:i] if c - q >= min_size), default=0)
    hi = min((q for q in cps[i + 1 :] if q - c >= min_size), default=y.size)
    left, right = y[max(lo, c - window) : c], y[c : min(hi, c + window)]
    before = _mean(left) if left.size else math.nan
    after = _mean(right) if right.size else math.nan
    short = left.size < min_size or right.size < min_size
    young = hi == y.size and right.size < 2 * min_size
    if young and not short and not _young_level_holds(left, right, max_pvalue, min_magnitude):
        short = True
    if short:
        pvalue = 1.0
    else:
        pvalue = _ttest(left, right)
        for span in TREND_SPANS:
            start = max(0, c - span * window)
            wide = y[start : c + span * window]
            others = [q - start for q in cps if q != c and start < q < c + span * window and abs(q - c) >= min_size]
            pvalue = max(pvalue, _step_beyond_trend(wide, c - start, others, max_pvalue))
    magnitude = after / before - 1.0 if before else math.inf
    return ChangePoint(index=c, before_mean=before, after_mean=after, magnitude=magnitude, pvalue=pvalue)


def _checked(values: Sequence[float] | np.ndarray, window: int, min_size: int) -> np.ndarray:
    if min_size < 2 or window < 2 * min_size:
        raise ValueError(f"need min_size >= 2 and window >= 2 * min_size, got {min_size=}, {window=}")
    y = np.asarray(values, dtype=np.float64)
    if y.ndim != 1 or not np.all(np.isfinite(y)):
        raise ValueError("values must be a sequence of finite numbers")
    return y


def detect(
    values: Sequence[float] | np.ndarray,
    *,
    window: int = WINDOW,
    max_pvalue: float = MAX_PVALUE,
    min_magnitude: float = MIN_MAGNITUDE,
    min_size: int = MIN_SIZE,
    outlier_k: float = OUTLIER_K,
) -> list[ChangePoint]:
    """Change points the detector reports in a per-commit series, oldest first (algorithm: module
    doc); `analyse` says which of them are confirmed. Outlier runs are left out first.

    Raises ValueError for non-finite values, `window < 2 * min_size` or `min_size < 2`.
    """
    analysed = analyse(values, window=window, max_pvalue=max_pvalue, min_magnitude=min_magnitude,
                       min_size=min_size, outlier_k=outlier_k)
    return sorted(analysed.confirmed + analysed.pending, key=lambda cp: cp.index)


def analyse(
    values: Sequence[float] | np.ndarray,
    *,
    window: int = WINDOW,
    max_pvalue: float = MAX_PVALUE,
    min_magnitude: float = MIN_MAGNITUDE,
    min_size: int = MIN_SIZE,
    outlier_k: float = OUTLIER_K,
    confirm_size: int = CONFIRM_SIZE,
    confirm_pvalue: float = CONFIRM_PVALUE,
) -> Analysis:
    """Confirmed and suspected change points and outlier runs of a history (docs/design.md).

    A pure function of `values` (its memos change no answer): the store calls it on the newest
    stretch of a history after each commit, a batch analysis on the whole history. Raises ValueError as `detect`.
    """
    y = _checked(values, window, min_size)
    flagged = outlier_runs(y, outlier_k=outlier_k, window=window)
    kept = np.flatnonzero(~flagged)
    clean = y[kept]
    found = _detect(clean, kept, window, max_pvalue, min_magnitude, min_size)
    reported = [_mapped(cp, kept) for cp in found]
    held = [y.size - cp.index >= confirm_size and cp.pvalue <= confirm_pvalue for cp in reported]
    suspected = suspect(clean, [cp.index for cp in found], window=window, max_pvalue=max_pvalue,
                        min_magnitude=min_magnitude, min_size=min_size)
    return Analysis([cp for cp, ok in zip(reported, held) if ok], _mapped(suspected, kept) if suspected else None,
                    [int(i) for i in np.flatnonzero(flagged)], [cp for cp, ok in zip(reported, held) if not ok])


def holds(values: Sequence[float] | np.ndarray, index: int, rising: bool, *, neighbours: Sequence[int] = (),
          outliers: Sequence[int] = (), window: int = WINDOW, min_magnitude: float = MIN_MAGNITUDE,
          min_size: int = MIN_SIZE, pvalue: float = HOLD_PVALUE) -> bool:
    """Whether a change point once confirmed at `index` still stands out (the hysteresis that keeps
    it confirmed when `analyse` stops confirming it; docs/design.md, "Change-point detection",
    confirmation): the first k kept
    commits from it, for some k of at least `min_size` (a slowdown fixed a few commits later was
    real), up to the next of the other standing change points (`neighbours`; at most `window`),
    against those since the previous one (at most `window`): moved the same way (`rising`), by at
    least half of `min_magnitude`, the pooled t-test under `pvalue`. Outlier runs left out."""
    y = np.asarray(values, dtype=np.float64)
    kept = np.ones(y.size, dtype=bool)
    kept[[i for i in outliers if 0 <= i < y.size]] = False
    lo = max([index - window, 0, *(q for q in neighbours if q < index)])
    hi = min([index + window, y.size, *(q for q in neighbours if q > index)])
    before, after = y[lo:index][kept[lo:index]], y[index:hi][kept[index:hi]]
    if before.size < 2:
        return False
    level = _mean(before)
    for k in range(min_size, after.size + 1):
        change = _mean(after[:k]) / level - 1.0 if level else math.inf
        if (change > 0) == rising and abs(change) >= min_magnitude / 2 and _ttest(before, after[:k]) <= pvalue:
            return True
    return False


def _mapped(cp: ChangePoint, kept: np.ndarray) -> ChangePoint:
    """A change point found on the kept commits, in positions of the whole history."""
    return ChangePoint(int(kept[cp.index]), cp.before_mean, cp.after_mean, cp.magnitude, cp.pvalue,
                       previous=int(kept[cp.index - 1]))


def suspect(
    values: Sequence[float] | np.ndarray,
    confirmed: Sequence[int],
    *,
    window: int = WINDOW,
    max_pvalue: float = MAX_PVALUE,
    min_magnitude: float = MIN_MAGNITUDE,
    min_size: int = MIN_SIZE,
) -> ChangePoint | None:
    """The newest commits' departure from the level before them, if `confirmed` does not hold it.

    The newest k commits (1 <= k < 2 * min_size; the longest such k wins) are a suspected new level
    when each is nearer their own mean than the mean of the level before them (its commits since
    the last confirmed change point, at most `window`, at least `min_size`), the pooled t-test
    between the two is under `max_pvalue` and the change is at least `min_magnitude`. None when
    there is no such departure, or when it starts within `min_size` commits of a confirmed change
    point (then it is that one). `values` are the kept commits (no outlier runs).
    """
    y = np.asarray(values, dtype=np.float64)
    n = y.size
    last = max(confirmed, default=0)
    for k in range(min(2 * min_size - 1, n - min_size), 0, -1):
        start = n - k
        if any(abs(start - c) < min_size for c in confirmed):
            continue
        base = y[max(last, start - window): start]
        if base.size < min_size:
            continue
        tail = y[start:]
        before, after = _mean(base), _mean(tail)
        if np.any(np.abs(tail - after) >= np.abs(tail - before)):
            continue
        magnitude = after / before - 1.0 if before else math.inf
        if abs(magnitude) < min_magnitude:
            continue
        pvalue = _ttest(base, tail)
        if pvalue <= max_pvalue:
            return ChangePoint(start, before, after, magnitude, pvalue)
    return None


def _detect(y: np.ndarray, kept: np.ndarray, window: int, max_pvalue: float, min_magnitude: float,
            min_size: int) -> list[ChangePoint]:
    """Split and merge on the kept (non-outlier) values `y`, at positions `kept` of the history."""
    n = y.size
    if n < 2 * min_size:
        return []
    # Split: binary E-Divisive segmentation in sliding windows, relaxed threshold. The windows are
    # laid on the history's positions, outlier runs included, not on the kept values: a stretch of
    # the history that starts on this grid (the store's analysis after an upload) then cuts every
    # window as the whole history does, wherever outlier runs were left out before it.
    weak: set[int] = set()
    split_pvalue = min(1.0, SPLIT_PVALUE_FACTOR * max_pvalue)
    step = max(1, window // 2)
    length = int(kept[-1]) + 1
    starts = list(range(0, max(length - window, 0) + 1, step))
    if starts[-1] + window < length:
        starts.append(length - window)
    for lo, hi in zip(np.searchsorted(kept, starts).tolist(),
                      np.searchsorted(kept, [s + window for s in starts]).tolist()):
        part = y[lo:hi]
        weak.update(lo + c for c in _remembered("split", part, (split_pvalue, min_size),
                                                lambda: _window_splits(part, split_pvalue, min_size)))

    # Merge: drop the weakest failing candidate until all pass.
    cps = sorted(weak)
    reach = max(TREND_SPANS) * window
    known: dict[tuple[int, tuple[int, ...]], ChangePoint] = {}

    def tested(i: int) -> ChangePoint:
        """`_stats` of cps[i], remembered for this merge: it depends only on the candidates within
        `reach` of it, and removing a candidate farther away leaves it as it was."""
        c = cps[i]
        a, b = max(0, c - reach), min(n, c + reach)
        near = tuple(q - a for q in cps if a <= q < b)
        if (c, near) not in known:
            part = y[a:b]
            found = _remembered("stats", part, (c - a, near, window, min_size, max_pvalue, min_magnitude),
                                lambda: _stats(part, list(near), near.index(c - a), window, min_size, max_pvalue,
                                               min_magnitude))
            known[(c, near)] = ChangePoint(found.index + a, found.before_mean, found.after_mean, found.magnitude,
                                           found.pvalue)
        return known[(c, near)]

    while cps:
        stats = [tested(i) for i in range(len(cps))]
        failing = [
            i for i, st in enumerate(stats) if st.pvalue > max_pvalue or abs(st.magnitude) < min_magnitude
        ]
        if not failing:
            crowded = [i for i in range(len(cps) - 1) if cps[i + 1] - cps[i] < min_size]
            if not crowded:
                ramp = _ramp_cut_into_steps(y, stats, window)
                if not ramp:
                    return stats
                del cps[ramp[0]]   # the weakest step of a ramp goes; the ramp is tested again without it
                continue
            # Of the closest pair, keep the stronger one.
            j = min(crowded, key=lambda i: cps[i + 1] - cps[i])
            failing = [j, j + 1]
        worst = max(failing, key=lambda i: (stats[i].pvalue, -abs(stats[i].magnitude)))
        del cps[worst]
    return []


RAMP_BIC_MARGIN = 0.0
"""How much lower the ramp's BIC must be than the steps' for consecutive same-direction steps to be
taken for a ramp."""


def _ramp_cut_into_steps(y: np.ndarray, stats: Sequence[ChangePoint], window: int) -> list[int]:
    """Positions in `stats`, weakest first but one, of consecutive change points in one direction
    (each within `window` of the next) that a ramp explains at least as well as steps do; [] when
    none. The level moving steadily over tens of commits (a slow drift between two flat stretches)
    passes every local step test: each cut has a different mean on each side. But it has no culprit
    commit, and it is not a staircase: one line between two bends (4 parameters: level, height and
    the two bends, found by search) fits it as well as k steps (k + 1 levels and k searched
    positions) do, by BIC. One point
    is kept for the ramp, the strongest: the level did move, and the series page shows it."""
    idx = [cp.index for cp in stats]
    k = 0
    while k < len(stats):
        j = k
        while (j + 1 < len(stats) and idx[j + 1] - idx[j] <= window
               and (stats[j + 1].magnitude > 0) == (stats[k].magnitude > 0)):
            j += 1
        if j > k:
            lo = max(idx[k - 1] if k else 0, idx[k] - window)
            hi = min(idx[j + 1] if j + 1 < len(idx) else y.size, idx[j] + window)
            segment = y[lo:hi]
            steps = np.column_stack([np.ones(segment.size)] + [(np.arange(lo, hi) >= c).astype(np.float64)
                                                                for c in idx[k:j + 1]])
            # a step's position was searched as the ramp's bends are: each counts as a parameter
            steps_bic = _bic(segment, steps) + (j + 1 - k) * math.log(segment.size)
            if _ramp_bic(segment, idx[k] - lo, idx[j] - lo) + RAMP_BIC_MARGIN <= steps_bic:
                members = sorted(range(k, j + 1), key=lambda m: (-stats[m].pvalue, abs(stats[m].magnitude)))
                return members[:-1]
        k = j + 1
    return []


def _ramp_bic(y: np.ndarray, first: int, last: int) -> float:
    """BIC of the best ramp y = a + d * clip((i - t1) / (t2 - t1), 0, 1) with t1 <= `first` and
    t2 >= `last` (searched over every pair; 4 parameters)."""
    n = y.size
    i = np.arange(n, dtype=np.float64)
    t1 = np.arange(0, first + 1, dtype=np.float64)[:, None, None]
    t2 = np.arange(last, n, dtype=np.float64)[None, :, None]
    r = np.clip((i - t1) / np.maximum(t2 - t1, 1.0), 0.0, 1.0)          # (t1, t2, n)
    rc = r - r.mean(axis=2, keepdims=True)
    yc = y - y.mean()
    srr = (rc * rc).sum(axis=2)
    sry = (rc * yc).sum(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        rss = float(yc @ yc) - np.where(srr > 0, sry * sry / srr, 0.0)
    best = max(float(rss.min()), 1e-300)
    return n * math.log(best / n) + 4 * math.log(n)


def dana_running_average(values: Sequence[float] | np.ndarray, *, range_: float = 0.05, required: int = 2) -> list[int]:
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
