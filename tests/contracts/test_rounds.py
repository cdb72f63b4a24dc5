"""The statistic the agent stops on and the analysis judges with (`pipeline.contracts.rounds`): Student's t
without scipy, the round levels, and the three-way verdict on known intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import t as student_t
from scipy.stats import trim_mean

from pipeline.contracts.rounds import (
    ROUND_TRIM,
    DecisionRule,
    classify,
    level_halfwidth,
    paired_change,
    segment_centres,
    t_pvalue,
    t_quantile,
)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 10, 11, 30, 99, 400])
def test_students_t_without_scipy_equals_scipys(df: int) -> None:
    statistic = np.concatenate([np.linspace(0.0, 12.0, 121), [25.0, 80.0, 1e3, 1e6]])
    expected = 2 * student_t.sf(statistic, df)
    got = t_pvalue(statistic, df)
    keep = expected > 1e-280
    assert np.allclose(got[keep], expected[keep], rtol=1e-9, atol=0.0)
    assert t_pvalue(np.inf, df) == 0.0 and t_pvalue(0.0, df) == 1.0
    for confidence in (0.9, 0.95, 0.99):
        assert t_quantile(confidence, df) == pytest.approx(student_t.ppf(0.5 + confidence / 2, df), rel=1e-10)


def test_round_levels_are_scipys_trimmed_means() -> None:
    """A round's level is `scipy.stats.trim_mean(round, ROUND_TRIM)`, written with numpy alone (agents do not
    install scipy), all rounds of one size in one sort: the same values up to the order of the sums."""
    rng = np.random.default_rng(5)
    sizes = np.array([1, 2, 3, 4, 5, 7, 10, 33, 150, 150, 1])
    values = rng.lognormal(-9, 0.3, int(sizes.sum()))
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    expected = [trim_mean(values[s:s + n], ROUND_TRIM) for s, n in zip(starts, sizes, strict=True)]
    assert np.allclose(segment_centres(values, sizes), expected, rtol=1e-14, atol=0.0)


def test_degrees_of_freedom_must_be_whole_and_positive() -> None:
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_pvalue(1.0, 0)


@pytest.mark.parametrize(("change", "low", "high", "pvalue", "threshold", "answer"), [
    (0.001, -0.002, 0.004, 0.5, 0.005, "same"),            # inside the band
    (0.0, -0.005, 0.005, 1.0, 0.005, "same"),              # touching it
    (0.348, -0.333, 1.724, 0.41, 0.02, "unknown"),          # the 2.7x slowdown a loaded CPU hid (issue 30)
    (0.004, -0.001, 0.009, 0.12, 0.005, "unknown"),         # straddles +t, not significant
    (0.004, 0.001, 0.007, 0.003, 0.005, "unknown"),         # significant, under t, not inside the band
    (0.0055, 0.00245, 0.00847, 0.0016, 0.00979, "unknown"),  # inside, but significant at half t: a 1 % slowdown (H200)
    (-0.0003, -0.0004, -0.0002, 0.002, 0.02, "same"),       # significant, a hundredth of a percent: the same
    (0.009, 0.004, 0.014, 0.05, 0.02, "same"),              # half t, not significant: inside the band
    (0.012, 0.010, 0.014, 1e-6, 0.005, "different"),        # beyond the band
    (-0.12, -0.134, -0.106, 1e-9, 0.02, "different"),       # beyond, the other side
    (0.03, -0.01, 0.07, 0.2, 0.02, "unknown"),              # large but not significant: not a change, not the same
])
def test_the_three_answers_on_known_intervals(change: float, low: float, high: float, pvalue: float, threshold: float,
                                              answer: str) -> None:
    assert classify(change, low, high, pvalue, threshold, max_pvalue=0.01) == answer


def test_a_threshold_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        classify(0.0, 0.0, 0.0, 1.0, 0.0, 0.01)


def _rounds_of(levels: list[float], size: int = 11) -> list[float]:
    """Samples whose rounds (of `size`) have these log levels exactly (every sample of a round alike)."""
    return [math.exp(level) for level in levels for _ in range(size)]


def test_a_paired_change_is_students_t_over_the_rounds() -> None:
    levels = [0.010, 0.012, 0.009, 0.011]
    base = [1.0] * 44
    change = paired_change(base, _rounds_of(levels), [11] * 4)
    mean, sd = float(np.mean(levels)), float(np.std(levels, ddof=1))
    half = student_t.ppf(0.975, 3) * sd / 2
    assert change.change == pytest.approx(math.expm1(mean))
    assert (change.low, change.high) == (pytest.approx(math.expm1(mean - half)), pytest.approx(math.expm1(mean + half)))
    assert change.pvalue == pytest.approx(2 * student_t.sf(mean / (sd / 2), 3))
    assert change.rounds == 4
    one = paired_change([1.0] * 11, _rounds_of([0.01]), [11])
    assert (one.low, one.high, one.pvalue) == (None, None, None)
    rule = DecisionRule(max_pvalue=0.01, default_threshold=0.03, thresholds={"c": 0.005, "near": 0.02})
    assert rule.answer("c", change) == "different" and rule.answer("other", change) == "same"
    assert rule.answer("near", change) == "unknown"   # +1.05 %, significant: half of a 2 % band (EVIDENT_SHARE)
    assert rule.answer("c", one) == "unknown"


def test_an_unpaired_level_knows_its_own_precision() -> None:
    samples = _rounds_of([0.0, 0.002, -0.002, 0.0])
    half = level_halfwidth(samples, [11] * 4)
    assert half == pytest.approx(student_t.ppf(0.975, 3) * float(np.std([0, 0.002, -0.002, 0], ddof=1)) / 2)
    assert level_halfwidth(samples[:11], [11]) == math.inf


def test_the_agent_stops_with_a_margin_the_analysis_does_not_need() -> None:
    """A case is stopped only when its answer holds with `STOP_MARGIN` to spare: the job's calibration
    goes on after it stops, and an interval at the band's edge may end up just outside it."""
    from pipeline.contracts.rounds import STOP_MARGIN, RoundChange

    rule = DecisionRule(max_pvalue=0.01, default_threshold=0.02)
    edge = RoundChange(0.0, -0.0195, 0.0195, 0.9, 4)          # within +-2 %, not within +-1.8 %
    assert rule.answer("c", edge) == "same" and rule.decided("c", edge) is None
    inside = RoundChange(0.0, -0.017, 0.017, 0.9, 4)
    assert rule.decided("c", inside) == "decided: same"
    barely = RoundChange(0.03, 0.02, 0.04, 0.0095, 4)          # significant at 0.01, not at 0.009
    assert rule.answer("c", barely) == "different" and rule.decided("c", barely) is None
    clear = RoundChange(0.03, 0.025, 0.035, 0.001, 4)
    assert rule.decided("c", clear) == "decided: different"
    small = RoundChange(0.019, 0.0185, 0.0205, 1e-6, 4)       # past 0.9 t, short of t: a change must reach t
    assert rule.answer("c", small) == "unknown" and rule.decided("c", small) is None
    assert 0 < STOP_MARGIN < 1


def test_the_agent_holds_a_fresh_case_to_its_rounds_spread_as_the_analysis_does() -> None:
    from pipeline.contracts.rounds import RoundChange, provisional_threshold

    assert provisional_threshold(0.02, None, 3.0) == 0.02 and provisional_threshold(0.02, 0.001, 3.0) == 0.02
    assert provisional_threshold(0.02, 0.08, 3.0) == pytest.approx(math.expm1(0.24))
    scattered = RoundChange(0.116, 0.044, 0.193, 0.004, 8, spread=0.08)
    fresh = DecisionRule(max_pvalue=0.01, default_threshold=0.02)
    assert fresh.answer("gather", scattered) == "unknown" and fresh.decided("gather", scattered) is None
    learned = DecisionRule(max_pvalue=0.01, default_threshold=0.02, thresholds={"gather": 0.05})
    assert learned.answer("gather", scattered) == "different" and learned.decided("gather", scattered) == "decided: different"
    assert classify(0.116, 0.044, 0.193, 0.004, 0.02, 0.01, different_at=0.27) == "unknown"
    assert classify(0.0, -0.01, 0.01, 0.9, 0.02, 0.01, different_at=0.27) == "same"
    change = paired_change([1.0] * 6, [1.0, 1.1, 1.0, 1.3, 1.0, 1.2], [2, 2, 2])
    assert change.spread is not None and change.spread > 0
