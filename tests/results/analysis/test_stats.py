"""Statistics on small series with known answers, and the calibration of the p-values on A/A data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chi2, median_abs_deviation
from scipy.stats import f as f_distribution
from scipy.stats import kstest, mannwhitneyu, norm, ttest_ind, wilcoxon
from scipy.stats import t as student_t

from pipeline.results.analysis.stats import (
    CHI2_1_MEDIAN,
    DEFAULT_BLOCKS,
    NOISE_FACTOR,
    PAIRED_DISPERSION_FLOOR,
    POOLED_MIN_ITEMS,
    paired_estimates,
    paired_verdicts,
    robust_sd,
    round_sizes,
    run_dispersion,
    run_shift_variance,
    run_to_run_noise,
    summarize,
    threshold,
    unpaired_estimates,
    verdicts,
)


FLAGGED = ("regressed", "improved")
"""Different: what a verdict may never say of identical code."""


def test_summarize_known_answer() -> None:
    s = summarize([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
    assert (s.n, s.median, s.mean, s.min, s.max) == (8, 4.5, 5.0, 2.0, 9.0)
    assert s.stdev == pytest.approx(math.sqrt(32 / 7))  # sample standard deviation, n - 1
    assert summarize([3.0]).stdev == 0.0
    with pytest.raises(ValueError):
        summarize([])


def test_rounds_reported_or_made_of_equal_blocks() -> None:
    assert round_sizes(9, [3, 3, 3]) == [3, 3, 3]
    assert DEFAULT_BLOCKS == 5
    assert round_sizes(12, None) == [3, 3, 2, 2, 2]  # old results: 5 consecutive blocks, larger first
    assert round_sizes(3, None) == [1, 1, 1]
    assert round_sizes(0, None) == []
    with pytest.raises(ValueError, match="do not split 9 samples"):
        round_sizes(9, [4, 4])


def _rounds_at(logs: list[float], per_round: int = 3) -> list[float]:
    """Samples of rounds whose medians are exp(logs): each round's values spread around its median."""
    return [math.exp(v + d) for v in logs for d in (-0.004, 0.0, 0.003)[:per_round]]


def test_paired_change_and_interval_by_hand() -> None:
    # round-level log ratios 0.01, 0.02, 0.03: mean 0.02, sd 0.01, se 0.01/sqrt(3) = 0.0057735;
    # t(0.975, 2) = 4.302653 -> half width 0.0248414; t = 3.4641 -> p = 2 sf(3.4641, 2) = 0.074180
    base = [1e-3] * 9
    head = [1e-3 * v for v in _rounds_at([0.01, 0.02, 0.03])]
    [e] = paired_estimates([(base, head, [3, 3, 3])])
    assert e.rounds == 3
    assert e.change == pytest.approx(math.exp(0.02) - 1)
    assert e.ci_low == pytest.approx(math.exp(0.02 - 0.0248414) - 1, abs=1e-6)   # -0.48 %
    assert e.ci_high == pytest.approx(math.exp(0.02 + 0.0248414) - 1, abs=1e-6)  # +4.58 %
    assert e.pvalue == pytest.approx(0.074180, abs=1e-5)
    # the same samples with no rounds reported: 5 blocks of 2, 2, 2, 2, 1 pairs
    [blocks] = paired_estimates([(base, head, None)])
    assert blocks.rounds == 5


def test_unpaired_change_and_welch_interval_by_hand() -> None:
    # log round medians: base 0, 0.01, 0.02 (mean 0.01, var 1e-4); head 0.05, 0.07, 0.09 (mean 0.07,
    # var 4e-4). Difference 0.06, se sqrt(5e-4/3) = 0.0129099, Welch df 25/8.5 = 2.941176
    base, head = _rounds_at([0.0, 0.01, 0.02]), _rounds_at([0.05, 0.07, 0.09])
    [e] = unpaired_estimates([((base, [3, 3, 3]), (head, [3, 3, 3]))])
    half = student_t.ppf(0.975, 25 / 8.5) * math.sqrt(5e-4 / 3)
    assert e.change == pytest.approx(math.exp(0.06) - 1)
    assert (e.ci_low, e.ci_high) == pytest.approx((math.exp(0.06 - half) - 1, math.exp(0.06 + half) - 1))
    reference = ttest_ind([0.05, 0.07, 0.09], [0.0, 0.01, 0.02], equal_var=False)
    assert e.pvalue == pytest.approx(reference.pvalue)
    low, high = reference.confidence_interval(0.95)
    assert (e.ci_low, e.ci_high) == pytest.approx((math.expm1(low), math.expm1(high)))


def test_verdicts_follow_threshold_significance_and_direction() -> None:
    base = [1e-3] * 15
    slower = [1e-3 * v for v in _rounds_at([0.095, 0.1, 0.105, 0.1, 0.097])]  # +10 %, every round alike
    [regressed, improved, small, better] = paired_verdicts(
        [(base, slower, [3] * 5), (slower, base, [3] * 5), (base, slower, [3] * 5), (base, slower, [3] * 5)],
        min_change=[0.05, 0.05, 0.25, 0.05])
    assert regressed.status == "regressed" and regressed.pvalue is not None and regressed.pvalue < 1e-5
    assert regressed.ci_low is not None and regressed.ci_high is not None
    assert regressed.ci_low < regressed.change < regressed.ci_high and regressed.ci_low > 0.09
    assert improved.status == "improved" and improved.change == pytest.approx(1 / (1 + regressed.change) - 1)
    assert small.status == "similar" and small.threshold == 0.25  # significant, but under half its threshold
    [near] = paired_verdicts([(base, slower, [3] * 5)], min_change=0.15)
    assert near.status == "inconclusive"   # inside the band, but significant at more than half of it
    assert paired_verdicts([(base, slower, [3] * 5)], lower_is_better=False)[0].status == "improved"
    assert better.status == "regressed"
    # large but not significant: round changes of -10 % .. +30 %
    noisy = [1e-3 * v for v in _rounds_at([-0.1, 0.3, 0.0, 0.25, -0.05])]
    [v] = paired_verdicts([(base, noisy, [3] * 5)], min_change=0.05)
    # not significant is not the same: an interval this wide cannot tell
    assert v.status == "inconclusive" and v.pvalue is not None and v.pvalue > 0.01 and v.change > 0.05


def test_a_case_whose_noise_is_not_learned_is_different_only_beyond_its_rounds_spread() -> None:
    # A loaded 2-core CPU, identical binaries, a memory-bound gather: every round's head slower,
    # 1.02-1.27 x (cpu_aa, fourteenth session): significant at +11.6 %, past the 2 % minimum.
    base = [1e-3] * 24
    head = [1e-3 * v for v in _rounds_at([0.02, 0.05, 0.08, 0.10, 0.12, 0.15, 0.20, 0.27])]
    pair = (base, head, [3] * 8)
    [learned] = paired_verdicts([pair], min_change=0.02)
    assert learned.status == "regressed" and learned.pvalue is not None and learned.pvalue < 0.01
    [fresh] = paired_verdicts([pair], min_change=0.02, learned=[False])
    assert fresh.status == "inconclusive" and fresh.threshold == 0.02 and fresh.change == learned.change
    # a clear change on quiet rounds is different either way, and the band of same is never widened
    steady = [1e-3 * v for v in _rounds_at([0.095, 0.1, 0.105, 0.1, 0.097, 0.1, 0.1, 0.1])]
    assert paired_verdicts([(base, steady, [3] * 8)], min_change=0.02, learned=[False])[0].status == "regressed"
    wide = [1e-3 * v for v in _rounds_at([-0.06, 0.06, -0.05, 0.05, -0.04, 0.04, -0.06, 0.06])]
    assert paired_verdicts([(base, wide, [3] * 8)], min_change=0.02, learned=[False])[0].status == "inconclusive"
    with pytest.raises(ValueError, match="learned marks"):
        paired_verdicts([pair], learned=[False, True])


def test_an_unpaired_fresh_series_is_different_only_beyond_its_rounds_spread() -> None:
    # A loaded 2-core CPU, unpaired A/A, a 64 MB memory-bound GEMM: its base run's rounds 12-30 % slower
    # than the head's (a neighbour's memory traffic in one run), significant at -20 %.
    base = [1e-3 * v for v in _rounds_at([0.12, 0.30, 0.18, 0.25, 0.15])]
    head = [1e-3 * v for v in _rounds_at([0.0, 0.03, -0.02, 0.05, 0.01])]
    item = ((base, [3] * 5), (head, [3] * 5))
    [learned] = verdicts([item], min_change=0.05, run_noise=0.01)
    assert learned.status == "improved" and learned.pvalue is not None and learned.pvalue < 0.01
    [fresh] = verdicts([item], min_change=0.05)
    assert fresh.status == "inconclusive" and fresh.change == learned.change
    # steady rounds: a clear 10 % change is regressed on a fresh series too
    steady = [1e-3 * v for v in _rounds_at([0.1, 0.1, 0.1, 0.1, 0.1])]
    assert verdicts([(([1e-3] * 15, [3] * 5), (steady, [3] * 5))], min_change=0.05)[0].status == "regressed"


def test_too_few_rounds_or_samples_is_insufficient_data() -> None:
    base, head = [1e-3] * 6, [2e-3] * 6
    [two_rounds] = paired_verdicts([(base, head, [3, 3])])
    assert two_rounds.status == "insufficient data" and two_rounds.pvalue is None
    assert two_rounds.change == pytest.approx(1.0)  # the point change is still reported
    [few] = verdicts([((base[:4], None), (head, None))])
    assert few.status == "insufficient data" and few.change == pytest.approx(1.0)
    [empty] = verdicts([(([], None), (head, None))])
    assert empty.status == "insufficient data" and empty.change is None and empty.rounds == 0
    with pytest.raises(ValueError, match="differ in length"):
        paired_verdicts([([1.0, 2.0], [1.0], None)])
    with pytest.raises(ValueError, match="2 thresholds for 1"):
        paired_verdicts([(base, head, None)], min_change=[0.1, 0.2])


def test_paired_sees_a_small_change_under_drift_that_unpaired_rounds_hide() -> None:
    drift = [1 + 0.1 * math.sin(i / 3) for i in range(40)]  # +-10 % device drift over the job
    base = [1e-3 * d for d in drift]
    head = [b * (1.03 + 0.002 * ((i % 7) - 3)) for i, b in enumerate(base)]
    [paired] = paired_verdicts([(base, head, [8] * 5)], min_change=0.02)
    assert paired.status == "regressed" and paired.change == pytest.approx(0.03, abs=0.002)
    assert paired.ci_low is not None and paired.ci_high is not None and 0.025 < paired.ci_low < paired.ci_high < 0.035
    [unpaired] = verdicts([((base, [8] * 5), (head, [8] * 5))], min_change=0.02)
    assert unpaired.status == "inconclusive"   # the drift hides it: unknown, never "the same"


def test_batched_verdicts_equal_one_call_per_item() -> None:
    rng = np.random.default_rng(5)
    paired, unpaired = [], []
    for i in range(120):
        n = int(rng.choice([1, 3, 5, 9, 12, 40]))
        rounds = None if i % 3 else [n]  # one round: insufficient
        if i % 3 == 1 and n >= 3:
            rounds = [n - 2, 1, 1]
        base = list(1e-3 * np.exp(rng.normal(0, 0.02, n)))
        head = list(np.array(base) * rng.choice([1.0, 1.05, 0.9]) * np.exp(rng.normal(0, 0.005, n)))
        if i % 17 == 3:
            base, head = [2e-3] * n, [2e-3] * n
        paired.append((base, head, rounds))
        unpaired.append(((base, rounds), (head, None)))
    assert paired_verdicts(paired, min_change=0.02) == [paired_verdicts([p], min_change=0.02)[0] for p in paired]
    # unpaired: with every item's run noise known (0: none), nothing is pooled across the batch
    assert (verdicts(unpaired, min_change=0.02, run_noise=0.0)
            == [verdicts([u], min_change=0.02, run_noise=0.0)[0] for u in unpaired])
    statuses = {v.status for v in paired_verdicts(paired, min_change=0.02)}
    assert statuses == {"regressed", "improved", "similar", "inconclusive", "insufficient data"}
    constant = paired_verdicts([([2e-3] * 10, [2e-3] * 10, None)])[0]
    assert (constant.status, constant.pvalue, constant.ci_low, constant.ci_high) == ("similar", 1.0, 0.0, 0.0)


# --- A/A: identical code, p-values must be uniform ---------------------------------------------

ROUNDS, PER_ROUND, COMPARISONS = 5, 40, 400


def _ar1(rng: np.random.Generator, n: int, phi: float, sd: float) -> np.ndarray:
    """A stationary AR(1) series: serially correlated noise, as samples taken back to back are."""
    x, out = rng.normal(0, sd / math.sqrt(1 - phi * phi)), np.empty(n)
    for i in range(n):
        x = phi * x + rng.normal(0, sd)
        out[i] = x
    return out


def _aa_jobs(seed: int) -> tuple[list, list]:
    """Simulated A/A comparisons of identical code: 5 rounds of 40 samples; each round carries its
    own random offset (placement of its buffers, rotated between rounds: a random effect, 1 %);
    samples are AR(1)-correlated (phi 0.9) within and across rounds; the device drifts slowly
    (paired: alike for both slots, as base and head alternate)."""
    rng = np.random.default_rng(seed)
    n = ROUNDS * PER_ROUND
    paired, unpaired = [], []
    for _ in range(COMPARISONS):
        drift = _ar1(rng, n, 0.99, 0.002)
        base = 1e-3 * np.exp(drift + _ar1(rng, n, 0.9, 0.004))
        head = 1e-3 * np.exp(drift + np.repeat(rng.normal(0, 0.01, ROUNDS), PER_ROUND) + _ar1(rng, n, 0.9, 0.004))
        paired.append((base, head, [PER_ROUND] * ROUNDS))
        sides = [1e-3 * np.exp(np.repeat(rng.normal(0, 0.01, ROUNDS), PER_ROUND) + _ar1(rng, n, 0.9, 0.004))
                 for _ in range(2)]
        unpaired.append(((sides[0], [PER_ROUND] * ROUNDS), (sides[1], [PER_ROUND] * ROUNDS)))
    return paired, unpaired


def test_aa_pvalues_are_uniform_with_rounds_and_were_not_with_samples() -> None:
    paired, unpaired = _aa_jobs(11)
    # The old verdicts (before issue 11): every sample an independent observation. Wilcoxon
    # signed-rank on the 200 log ratios and Mann-Whitney U on the 200 + 200 samples: on these
    # A/A data their p-values pile up near 0 (KS p ~ 1e-170 and 1e-200): identical code "changed".
    old_paired = [wilcoxon(np.log(h / b)).pvalue for b, h, _ in paired]
    old_unpaired = [mannwhitneyu(b[0], h[0]).pvalue for b, h in unpaired]
    assert kstest(old_paired, "uniform").pvalue < 1e-50
    assert kstest(old_unpaired, "uniform").pvalue < 1e-50
    # Round-level: uniform (KS does not reject at 0.05), and 5 % false alarms at p <= 0.05.
    new_paired = [e.pvalue for e in paired_estimates(paired)]
    new_unpaired = [e.pvalue for e in unpaired_estimates(unpaired)]
    assert kstest(new_paired, "uniform").pvalue > 0.05
    assert kstest(new_unpaired, "uniform").pvalue > 0.05
    assert 0.02 < np.mean(np.array(new_paired) <= 0.05) < 0.08
    # and the intervals cover the true change (0) about 95 % of the time
    covered = [e.ci_low <= 0 <= e.ci_high for e in paired_estimates(paired)]  # type: ignore[operator]
    assert 0.92 < np.mean(covered) < 0.98


GPU_TIMER_TICK = 32e-9
"""Resolution of the GPU's timer as the agents read it (an H100's event timestamps: 32 ns steps)."""


def _quantized_aa_jobs(seed: int, cases: int = 200, rounds: int = 5, per_round: int = 160) -> list:
    """A/A pairs of microsecond-scale kernels (18-40 us) read on a 32 ns timer: a round's level is
    shared by both slots, each sample jitters by 0.2 % (two or three ticks), then both are rounded
    to the tick, as the device's timer does."""
    rng = np.random.default_rng(seed)
    jobs = []
    for _ in range(cases):
        level = rng.uniform(18e-6, 40e-6) * np.exp(np.repeat(rng.normal(0, 0.003, rounds), per_round))
        base, head = (np.round(level * np.exp(rng.normal(0, 0.002, rounds * per_round)) / GPU_TIMER_TICK)
                      * GPU_TIMER_TICK for _ in range(2))
        jobs.append((base, head, [per_round] * rounds))
    return jobs


def test_aa_pvalues_stay_uniform_on_a_coarse_timer() -> None:
    """Issue 11, H100 A/A: a round's median log ratio of microsecond-scale cases was exactly 0 in
    every round for a quarter of the vendor controls (p = 1: KS p 1e-6). The mean of a round's middle
    fifth is not a step function of the timer's ticks."""
    jobs = _quantized_aa_jobs(17)
    old = []   # the median of each round's log ratios, then the same t-test
    for base, head, rounds in jobs:
        medians = np.median(np.log(head / base).reshape(len(rounds), -1), axis=1)
        sd = medians.std(ddof=1)
        old.append(1.0 if sd == 0 else 2 * student_t.sf(abs(medians.mean()) / (sd / math.sqrt(len(rounds))),
                                                         len(rounds) - 1))
    assert np.mean(np.array(old) == 1.0) > 0.3
    assert kstest(old, "uniform").pvalue < 1e-20
    new = [e.pvalue for e in paired_estimates(jobs)]
    assert np.mean(np.array(new) >= 0.999) < 0.02
    assert kstest(new, "uniform").pvalue > 0.05
    assert 0.0 < np.mean(np.array(new) <= 0.05) < 0.1


def test_unpaired_run_noise_by_hand() -> None:
    # the same rounds as the Welch test above; one run's level noise 0.03 exceeds both sides' round
    # variances of the mean (1e-4/3, 4e-4/3): se = sqrt(2) x 0.03, a known variance (the normal)
    base, head = _rounds_at([0.0, 0.01, 0.02]), _rounds_at([0.05, 0.07, 0.09])
    [e] = unpaired_estimates([((base, [3, 3, 3]), (head, [3, 3, 3]))], run_noise=0.03)
    se = math.sqrt(2) * 0.03
    assert e.pvalue == pytest.approx(2 * norm.sf(0.06 / se), rel=1e-4)
    assert (e.ci_low, e.ci_high) == pytest.approx((math.expm1(0.06 - 1.959964 * se), math.expm1(0.06 + 1.959964 * se)),
                                                  rel=1e-4)
    # a run noise below both sides' own: Welch's test, unchanged
    [welch] = unpaired_estimates([((base, [3, 3, 3]), (head, [3, 3, 3]))])
    [small] = unpaired_estimates([((base, [3, 3, 3]), (head, [3, 3, 3]))], run_noise=0.001)
    assert small == welch
    # one side dominated: that side's variance is the run's, the other keeps its rounds' (and its df)
    [mixed] = unpaired_estimates([((base, [3, 3, 3]), (head, [3, 3, 3]))], run_noise=0.009)
    se_mixed = math.sqrt(0.009 ** 2 + 4e-4 / 3)
    df = (0.009 ** 2 + 4e-4 / 3) ** 2 / ((4e-4 / 3) ** 2 / 2)
    assert mixed.pvalue == pytest.approx(2 * student_t.sf(0.06 / se_mixed, df), rel=1e-4)
    with pytest.raises(ValueError, match="run noises"):
        unpaired_estimates([((base, None), (head, None))], run_noise=[0.1, 0.2])


def _runs(rng: np.random.Generator, run_sd: float, change: float = 0.0) -> tuple:
    """One unpaired comparison: two runs of 5 rounds x 40 samples, each run offset by its own
    N(0, run_sd) (its load, its placement: what its rounds share), rounds by 1 %, samples AR(1)."""
    n = ROUNDS * PER_ROUND
    return tuple((1e-3 * np.exp(rng.normal(0, run_sd) + shift + np.repeat(rng.normal(0, 0.01, ROUNDS), PER_ROUND)
                                + _ar1(rng, n, 0.9, 0.004)), [PER_ROUND] * ROUNDS)
                 for shift in (0.0, math.log1p(change)))


def test_unpaired_aa_with_a_run_effect_is_uniform_only_with_the_run_noise() -> None:
    """Issue 11's CPU A/A: runs of identical code differ by more than their rounds say. Without the
    run level the p-values pile up near 0; with the run noise learned from the series' history
    (`run_to_run_noise` over 30 earlier runs of the same model) they are uniform, and a real 15 %
    change is still found every time."""
    rng = np.random.default_rng(5)
    run_sd = 0.03
    history = [float(np.median(_runs(rng, run_sd)[0][0])) for _ in range(30)]
    learned = run_to_run_noise(history, ["same"] * len(history))
    assert learned == pytest.approx(run_sd, rel=0.5)
    aa = [_runs(rng, run_sd) for _ in range(COMPARISONS)]
    # one comparison at a time: nothing to pool the run level from, the rounds alone
    assert kstest([unpaired_estimates([item])[0].pvalue for item in aa], "uniform").pvalue < 1e-6
    with_runs = [e.pvalue for e in unpaired_estimates(aa, run_noise=learned)]
    assert kstest(with_runs, "uniform").pvalue > 0.05
    limit = threshold(0.05, learned * math.sqrt(2))
    # p <= 0.01 and |change| >= 3 sd of a change between runs: ~0.3 % of identical-code comparisons
    flagged = [v for v in verdicts(aa, min_change=limit, run_noise=learned) if v.status in FLAGGED]
    assert len(flagged) <= 0.01 * len(aa)
    real = [_runs(rng, run_sd, change=0.30) for _ in range(20)]
    assert all(v.status == "regressed" for v in verdicts(real, min_change=limit, run_noise=learned))


def _suite_of_runs(rng: np.random.Generator, cases: int, change: float = 0.0, changed: int = 0,
                   offset: float = 2.0) -> list:
    """One unpaired comparison of a suite: two runs of `cases` cases, each case with its own size of
    rounds' noise (0.2-2 %) and a run offset of its own about `offset` times that (what the rounds
    cannot see); the first `changed` cases really changed by `change`."""
    out = []
    for i in range(cases):
        noise = rng.uniform(0.002, 0.02)
        sides = []
        for shift in (0.0, math.log1p(change) if i < changed else 0.0):
            rounds = rng.normal(0, noise, ROUNDS) + rng.normal(0, offset * noise / math.sqrt(ROUNDS))
            sides.append((1e-3 * np.exp(shift + np.repeat(rounds, PER_ROUND) + rng.normal(0, 0.002, ROUNDS * PER_ROUND)),
                          [PER_ROUND] * ROUNDS))
        out.append(tuple(sides))
    return out


def test_a_fresh_series_pools_the_run_level_from_the_comparison() -> None:
    """Issue 11's GPU unpaired A/A: fresh series (no learned run noise), the rounds alone made p-values
    pile near 0 and the assumed 3 % near 1; pooled over the comparison's cases (`run_dispersion`)
    they are uniform. Never bolder than the default: where most cases really changed, the pooled
    test is the default's. Fewer than POOLED_MIN_ITEMS cases: the default."""
    rng = np.random.default_rng(11)
    suites = [_suite_of_runs(rng, 82) for _ in range(6)]
    alone = [unpaired_estimates([case])[0].pvalue for suite in suites for case in suite]
    assumed = [e.pvalue for suite in suites for e in unpaired_estimates(suite, run_noise=0.03)]
    pooled = [e.pvalue for suite in suites for e in unpaired_estimates(suite, default_run_noise=0.03)]
    assert kstest(alone, "uniform", alternative="greater").pvalue < 1e-6       # too small: false alarms
    assert kstest(assumed, "uniform", alternative="less").pvalue < 1e-6        # too large: blind
    assert kstest(pooled, "uniform").pvalue > 0.05
    assert 1.5 < run_dispersion(*_diffs_and_variances(suites[0])) < 10

    # 70 of 82 cases 15 % slower: the dispersion is large, the default bounds the test; it finds about as
    # many (a case below the bound keeps Welch's degrees of freedom, a little more cautious than the normal)
    most = _suite_of_runs(rng, 82, change=0.15, changed=70)
    bounded = verdicts(most, min_change=0.05, default_run_noise=0.03)
    by_default = verdicts(most, min_change=0.05, run_noise=0.03)
    found = sum(v.status == "regressed" for v in bounded[:70])
    assert found >= 60 and abs(found - sum(v.status == "regressed" for v in by_default[:70])) <= 3
    assert all(v.status not in FLAGGED for v in bounded[70:])
    few = _suite_of_runs(rng, POOLED_MIN_ITEMS - 1)
    assert unpaired_estimates(few, default_run_noise=0.03) == unpaired_estimates(few, run_noise=0.03)


def test_controls_pool_their_run_level_apart_from_the_suite_cases() -> None:
    """Vendor controls (torch graph replays) differ between runs by more than their rounds say, and by
    more than the suite's cubins do: pooled with the suite, their p-values pile near 0 (false alarms)
    and the suite's near 1; pooled per group (`groups`), both are uniform. A group too small to pool
    borrows from all items."""
    rng = np.random.default_rng(5)
    mixed, labels = [], []
    for _ in range(6):
        suite, controls = _suite_of_runs(rng, 82), _suite_of_runs(rng, 82, offset=3.5)
        mixed.append(suite + controls)
        labels.append(["suite"] * 82 + ["control"] * 82)
    together = [unpaired_estimates(m, default_run_noise=0.03) for m in mixed]
    apart = [unpaired_estimates(m, default_run_noise=0.03, groups=g) for m, g in zip(mixed, labels)]
    assert kstest([e.pvalue for es in together for e in es[82:]], "uniform", alternative="greater").pvalue < 1e-4
    assert kstest([e.pvalue for es in together for e in es[:82]], "uniform", alternative="less").pvalue < 1e-4
    for part in (slice(0, 82), slice(82, 164)):
        assert kstest([e.pvalue for es in apart for e in es[part]], "uniform").pvalue > 0.05
    few = ["suite"] * 82 + ["control"] * 82
    few[:POOLED_MIN_ITEMS - 1] = ["odd"] * (POOLED_MIN_ITEMS - 1)   # too few to pool alone: all items' level
    odd = unpaired_estimates(mixed[0], default_run_noise=0.03, groups=few)[:POOLED_MIN_ITEMS - 1]
    assert odd == together[0][:POOLED_MIN_ITEMS - 1]
    with pytest.raises(ValueError, match="3 groups for 164"):
        unpaired_estimates(mixed[0], default_run_noise=0.03, groups=["a", "b", "c"])


def test_run_shift_variance_known_answers() -> None:
    """The smallest s with median(diff^2 / ((variance + s) m)) <= 1: all items 20 % apart with no
    variance of their own give s = 0.2^2 / m; items that agree with their variances give 0; too few, None."""
    tens = np.full(10, 0.2)
    assert run_shift_variance(tens, np.zeros(10)) == pytest.approx(0.04 / CHI2_1_MEDIAN, rel=1e-9)
    assert run_shift_variance(tens, np.full(10, 0.01)) == pytest.approx(0.04 / CHI2_1_MEDIAN - 0.01, rel=1e-9)
    assert run_shift_variance(np.full(10, 0.01), np.full(10, 0.01)) == 0.0
    assert run_shift_variance(tens[:9], np.zeros(9)) is None
    with_df = run_shift_variance(tens, np.zeros(10), df=np.full(10, 4.0))
    assert with_df == pytest.approx(0.04 / f_distribution.median(1, 4.0), rel=1e-9)


def test_run_shift_variance_is_the_root_to_rounding() -> None:
    """With an odd number of items the median is the k-th smallest term (k = (n + 1) / 2), at most 1 once
    k items' own roots r_i = diff_i^2 / m - variance_i lie at or under s: the answer is the k-th smallest r_i
    (or 0). brentq finds it to rounding, zero variances (an infinite excess at s = 0) too."""
    rng = np.random.default_rng(7)
    worst = 0.0
    for trial in range(300):
        n = int(rng.choice([11, 21, 41, 81]))
        variances = rng.uniform(1e-8, 1e-4, n) * (rng.random(n) > (0.3 if trial % 2 else -1.0))
        diffs = rng.normal(0, 1, n) * np.sqrt(variances + rng.uniform(1e-6, 3e-4)) * rng.uniform(0.5, 3)
        df = rng.choice([2.0, 4.0, 7.5], n)
        m = f_distribution.median(1, df)
        exact = max(0.0, float(np.sort(np.square(diffs) / m - variances)[(n + 1) // 2 - 1]))
        got = run_shift_variance(diffs, variances, df=df)
        assert (got == 0.0) == (exact == 0.0), (got, exact)
        worst = max(worst, abs(got - exact) / exact if exact else 0.0)
    assert worst < 1e-13, worst


def test_hand_written_statistics_equal_scipys() -> None:
    """What stays written by hand, and why: the chi-square median in the agent's import path (no scipy
    there) and `robust_sd`'s MAD (scipy's gives the same bits ten times slower)."""
    assert CHI2_1_MEDIAN == chi2.median(1)
    rng = np.random.default_rng(3)
    for size in (1, 2, 5, 20, 101):
        values = rng.normal(0, 0.01, size)
        assert robust_sd(list(values)) == 1.4826 * median_abs_deviation(values, center=lambda x, axis: 0.0)
        assert robust_sd(list(values), center=None) == 1.4826 * median_abs_deviation(values)


def _shifted_runs(rng: np.random.Generator, cases: int, shift: float, spread: float, change: float = 0.0,
                  changed: int = 0) -> list:
    """Two runs of a CPU suite whose head run is slower as a whole (a loaded host): per case a shift of
    `shift` +- `spread` (logs) on top of quiet rounds (0.5 %); the first `changed` cases really changed."""
    out = []
    for i in range(cases):
        sides = []
        for moved in (0.0, shift + rng.normal(0, spread) + (math.log1p(change) if i < changed else 0.0)):
            rounds = moved + rng.normal(0, 0.005, ROUNDS)
            sides.append((1e-3 * np.exp(np.repeat(rounds, PER_ROUND) + rng.normal(0, 0.002, ROUNDS * PER_ROUND)),
                          [PER_ROUND] * ROUNDS))
        out.append(tuple(sides))
    return out


def test_identical_binaries_carry_a_shift_the_whole_run_shares() -> None:
    """A 2-core VM's unpaired A/A (bench/cpu_aa.py): the head run read 4-43 % slower in all 20 of its
    identical cases, and 11 were flagged: the pooled run level is bounded by the 3 % default, and a
    shift all cases share is not a factor on their rounds' variances. Marked as identical binaries
    (`calibration`), the cases carry that shift as a variance of their own: nothing flagged. When the
    runs agree it adds nothing, and a real change among identical cases is still found."""
    rng = np.random.default_rng(7)
    limit = threshold(0.05, 0.03 * math.sqrt(2))
    shifted = _shifted_runs(rng, 20, shift=math.log(1.2), spread=0.1)
    blind = verdicts(shifted, min_change=limit, default_run_noise=0.03)
    assert sum(v.status == "regressed" for v in blind) >= 8
    carried = verdicts(shifted, min_change=limit, default_run_noise=0.03, calibration=[True] * 20)
    assert all(v.status not in FLAGGED for v in carried)

    quiet = _shifted_runs(rng, 20, shift=0.0, spread=0.003, change=0.25, changed=1)
    marks = [False] + [True] * 19
    assert (verdicts(quiet, min_change=limit, default_run_noise=0.03, calibration=marks)
            == verdicts(quiet, min_change=limit, default_run_noise=0.03))
    assert verdicts(quiet, min_change=limit, default_run_noise=0.03, calibration=marks)[0].status == "regressed"
    with pytest.raises(ValueError, match="2 calibration marks for 20"):
        unpaired_estimates(quiet, calibration=[True, True])


def _paired_job(rng: np.random.Generator, cases: int, offset: float, change: float = 0.0, changed: int = 0) -> list:
    """One paired job: per case its own rounds' noise (0.1-1 %) and an offset of its log ratio that
    every round of this job shares, `offset` times the rounds' noise over sqrt(rounds) (what a CPU's
    paired A/A showed: placement or cache state kept for the job); the first `changed` really changed."""
    out = []
    for i in range(cases):
        noise = rng.uniform(0.001, 0.01)
        shared = rng.normal(0, offset * noise / math.sqrt(ROUNDS)) + (math.log1p(change) if i < changed else 0.0)
        base = 1e-3 * np.exp(rng.normal(0, 0.002, ROUNDS * PER_ROUND))
        ratio = np.exp(shared + np.repeat(rng.normal(0, noise, ROUNDS), PER_ROUND))
        out.append((base, base * ratio, [PER_ROUND] * ROUNDS))
    return out


def test_identical_binaries_of_a_paired_job_calibrate_its_noise() -> None:
    """A CPU's paired A/A (bench/cpu_aa.py: 0 flagged, but KS p 0.027, 17 % of p-values under 0.1):
    the rounds of one job miss an offset the job shares. Identical binaries timed in the same job
    (`calibration`) measure it: scaled by their dispersion the p-values are uniform; a real 10 %
    change among them is still found, and fewer than POOLED_MIN_ITEMS identical ones change nothing."""
    rng = np.random.default_rng(8)
    jobs = [_paired_job(rng, 40, offset=2.0) for _ in range(10)]
    rounds_only = [e.pvalue for job in jobs for e in paired_estimates(job)]
    calibrated = [e.pvalue for job in jobs for e in paired_estimates(job, calibration=[True] * 40)]
    assert kstest(rounds_only, "uniform", alternative="greater").pvalue < 1e-4
    assert kstest(calibrated, "uniform").pvalue > 0.05

    job = _paired_job(rng, 40, offset=2.0, change=0.10, changed=8)
    found = paired_verdicts(job, min_change=0.02, calibration=[False] * 8 + [True] * 32)
    assert [v.status for v in found[:8]] == ["regressed"] * 8
    assert all(v.status not in FLAGGED for v in found[8:])
    few = [False] * (41 - POOLED_MIN_ITEMS) + [True] * (POOLED_MIN_ITEMS - 1)
    assert paired_estimates(job, calibration=few) == paired_estimates(job)
    with pytest.raises(ValueError, match="2 calibration marks for 40"):
        paired_estimates(job, calibration=[True, True])


def _rows_with_z(z: float, rows: int = 30, rounds: int = 4) -> list:
    """Paired rows whose round values (log ratios) have mean 0.002 and exactly the standard error that
    makes each row's t statistic `z`, 5 equal samples a round."""
    pattern = np.arange(rounds) - (rounds - 1) / 2
    sd = 0.002 / z * math.sqrt(rounds)
    levels = 0.002 + sd * pattern / pattern.std(ddof=1)
    return [(np.ones(5 * rounds), np.repeat(np.exp(levels), 5), [5] * rounds)] * rows


def test_identical_binaries_that_spread_less_than_their_rounds_say_narrow_the_test() -> None:
    """The calibration is taken as it comes, down to its floor: identical rows whose t statistics sit
    at sqrt(0.7) of their F(1, 3) median say the rounds overstate this job's noise by 1 / 0.7; held at 1
    (before), such a job's A/A p-values were pushed up (H100 nightlies: pooled KS p 0.039, mean 0.525)."""
    expected = math.sqrt(f_distribution.median(1, 3))

    def half_widths(z: float) -> tuple[float, float]:
        job = _rows_with_z(z * expected)
        plain, calibrated = paired_estimates(job)[0], paired_estimates(job, calibration=[True] * len(job))[0]
        return tuple(math.log1p(e.ci_high) - math.log1p(e.ci_low) for e in (calibrated, plain))  # type: ignore[return-value]

    narrowed, plain = half_widths(math.sqrt(0.7))
    assert narrowed / plain == pytest.approx(math.sqrt(0.7), rel=1e-6)
    floored, plain = half_widths(0.1)   # agreeing far too well (a median of exact zeros would be 0): the floor
    assert floored / plain == pytest.approx(math.sqrt(PAIRED_DISPERSION_FLOOR), rel=1e-6)
    widened, plain = half_widths(2.0)
    assert widened / plain == pytest.approx(2.0, rel=1e-6)


def test_paired_calibration_keeps_aa_p_values_uniform_when_rounds_tell_all() -> None:
    """Jobs with no offset of their own (the rounds tell everything): calibrated by their 40 identical
    rows, the A/A p-values are neither bold nor conservative (mean 0.503 with this seed; 0.522 when the
    dispersion was held at 1 or more, KS p 0.004)."""
    rng = np.random.default_rng(3)
    pvalues = np.array([e.pvalue for _ in range(40)
                        for e in paired_estimates(_paired_job(rng, 40, offset=0.0), calibration=[True] * 40)])
    assert abs(pvalues.mean() - 0.5) < 0.01
    assert kstest(pvalues, "uniform").pvalue > 0.05
    assert abs((pvalues < 0.05).mean() - 0.05) < 0.015


def _diffs_and_variances(items: list) -> tuple[np.ndarray, np.ndarray]:
    """Each item's log difference and its rounds' variance of it (Welch's, no run level), by hand."""
    diffs, variances = [], []
    for (base, b_rounds), (head, h_rounds) in items:
        levels = [np.log(np.asarray(side)).reshape(len(r), -1).mean(axis=1) for side, r in ((base, b_rounds), (head, h_rounds))]
        diffs.append(levels[1].mean() - levels[0].mean())
        variances.append(sum(v.var(ddof=1) / len(v) for v in levels))
    return np.asarray(diffs), np.asarray(variances)


# --- noise and thresholds ------------------------------------------------------------------------

def test_threshold_is_the_floor_or_k_times_the_noise() -> None:
    assert NOISE_FACTOR == 3.0
    assert threshold(0.02, None) == 0.02
    assert threshold(0.02, 0.001) == 0.02
    assert threshold(0.02, 0.01) == pytest.approx(0.03)
    assert threshold(0.05, 0.01, factor=6) == pytest.approx(0.06)


def test_robust_sd_known_answers_and_outliers() -> None:
    assert robust_sd([]) is None
    # |x| = 1, 1, 2, 2, 3 around 0: median 2 -> 1.4826 * 2
    assert robust_sd([-1.0, 1.0, -2.0, 2.0, 3.0]) == pytest.approx(2 * 1.4826)
    # around their median (10): deviations 1, 1, 0, 1, 1 -> 1.4826
    assert robust_sd([9.0, 11.0, 10.0, 9.0, 11.0], center=None) == pytest.approx(1.4826)
    # a real change among repetitions barely moves it; the standard deviation would be 30 times larger
    rng = np.random.default_rng(2)
    values = list(rng.normal(0, 0.01, 29)) + [0.5]
    assert robust_sd(values) == pytest.approx(0.01, rel=0.35)


def test_run_to_run_noise_prefers_pairs_of_one_binary() -> None:
    from pipeline.results.analysis.stats import paired_noise, run_to_run_noise

    # 6 binaries run twice (a rerun moves +-0.2 %), each followed by another binary run once (+5 to 10 %):
    # 6 steps within one binary, 11 across binaries
    medians, digests = [], []
    for k in range(6):
        level = 1e-3 * (1.05 if k % 2 else 1.0)
        medians += [level, level * (1.002 if k % 3 else 0.998), 1.1e-3]
        digests += [f"b{k}", f"b{k}", f"single{k}"]
    same_only = run_to_run_noise(medians, digests)
    assert same_only == pytest.approx(1.4826 * math.log(1.002) / math.sqrt(2), rel=0.01)
    anonymous = run_to_run_noise(medians, [None] * len(medians))  # every step counts: the code changes too
    assert anonymous is not None and anonymous > 5 * same_only
    assert run_to_run_noise(medians[:5], [None] * 5) is None  # 4 steps: too few
    with pytest.raises(ValueError, match="digests"):
        run_to_run_noise(medians, digests[:3])
    assert paired_noise([0.01, -0.01, 0.02, -0.02]) is None
    assert paired_noise([0.01, 0.01, 0.01, 0.01, 0.01]) == pytest.approx(1.4826 * math.log(1.01))  # an offset is noise


def test_the_agents_stop_rule_reads_the_analysis_numbers() -> None:
    """Issue 30: the agent decides a paired case on `rounds.paired_changes` (numpy only); the analysis
    judges the stored rounds with `paired_estimates`. With a job's identical binaries calibrating the
    rest, both give the same change, interval and p-value."""
    from pipeline.contracts.rounds import paired_changes

    rng = np.random.default_rng(30)
    job = _paired_job(rng, 40, offset=2.0, change=0.05, changed=6)
    marks = [False] * 6 + [True] * 34
    groups = ["suite"] * 20 + ["control"] * 20
    agent = paired_changes(job, calibration=marks, groups=groups)
    analysis = paired_estimates(job, calibration=marks, groups=groups)
    for a, b in zip(agent, analysis, strict=True):
        assert a.rounds == b.rounds
        assert (a.change, a.low, a.high, a.pvalue) == pytest.approx((b.change, b.ci_low, b.ci_high, b.pvalue),
                                                                     rel=1e-9, abs=1e-15)
    uncalibrated = paired_changes(job)
    assert any(abs((u.high - u.low) - (a.high - a.low)) > 1e-6 for u, a in zip(uncalibrated, agent, strict=True)), \
        "the calibration must matter in this job, or the test shows nothing"
