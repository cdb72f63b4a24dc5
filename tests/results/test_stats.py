"""Statistics on small series with known answers."""

from __future__ import annotations

import math

import pytest

from pipeline.results.stats import rank_test, summarize, verdict

BASE = [1.0, 1.1, 1.2, 1.3, 1.4]


def test_summarize_known_answer() -> None:
    s = summarize([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
    assert (s.n, s.median, s.mean, s.min, s.max) == (8, 4.5, 5.0, 2.0, 9.0)
    assert s.stdev == pytest.approx(math.sqrt(32 / 7))  # sample standard deviation, n - 1
    assert summarize([3.0]).stdev == 0.0
    with pytest.raises(ValueError):
        summarize([])


def test_rank_test_known_answers() -> None:
    # 5 vs 5 fully separated: exact two-sided p = 2 / C(10, 5) = 2/252
    assert rank_test([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert rank_test([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]) == pytest.approx(2 / 252)
    assert rank_test([1, 3, 5, 7, 9], [2, 4, 6, 8, 10]) > 0.5
    assert rank_test([1.0] * 5, [1.0] * 5) == 1.0


def test_verdict_regressed_and_improved_follow_the_direction() -> None:
    slower = [x * 1.5 for x in BASE]
    v = verdict(BASE, slower, lower_is_better=True, min_change=0.05, max_pvalue=0.01, min_samples=5)
    assert v.status == "regressed" and v.change == pytest.approx(0.5) and v.pvalue == pytest.approx(2 / 252)
    assert verdict(slower, BASE).status == "improved"
    assert verdict(BASE, slower, lower_is_better=False).status == "improved"


def test_a_change_needs_both_significance_and_magnitude() -> None:
    # significant (fully separated) but +42% is under a 50% minimum: similar
    tiny = [x + 0.5 for x in BASE]  # 1.5..1.9: median 1.2 -> 1.7
    assert verdict(BASE, tiny, min_change=0.5).status == "similar"
    assert verdict(BASE, tiny, min_change=0.05).status == "regressed"
    # large (median +20%) but overlapping samples: not significant
    noisy_base = [1.0, 2.0, 3.0, 4.0, 5.0]
    noisy_head = [1.2, 2.2, 3.6, 4.5, 5.5]
    v = verdict(noisy_base, noisy_head, min_change=0.05)
    assert v.status == "similar" and v.change == pytest.approx(0.2) and v.pvalue is not None and v.pvalue > 0.01


def test_too_few_samples_is_insufficient_data() -> None:
    v = verdict(BASE[:4], [x * 2 for x in BASE])
    assert v.status == "insufficient data" and v.pvalue is None and v.change == pytest.approx(2.4 / 1.15 - 1)
    assert verdict([], BASE).change is None
    # 4 vs 5 separated: exact p = 2 / C(9, 4) = 0.016
    assert verdict(BASE[:4], [x * 2 for x in BASE], min_samples=4).pvalue == pytest.approx(2 / 126)
    assert verdict(BASE[:4], [x * 2 for x in BASE], min_samples=4, max_pvalue=0.05).status == "regressed"


def test_paired_verdict_sees_a_small_change_under_drift_that_unpaired_samples_hide() -> None:
    import math

    from pipeline.results.stats import min_pairs, paired_verdict, verdict

    drift = [1 + 0.1 * math.sin(i) for i in range(12)]          # +-10% from round to round
    base = [1e-3 * d for d in drift]
    head = [b * (1.03 + 0.002 * ((i % 3) - 1)) for i, b in enumerate(base)]  # +3% in every round
    assert verdict(base, head, min_change=0.02).status == "similar"
    paired = paired_verdict(base, head, min_change=0.02)
    assert paired.status == "regressed" and paired.change == pytest.approx(0.03, abs=0.002)
    assert paired.pvalue is not None and paired.pvalue < 0.001
    assert paired_verdict(head, base, min_change=0.02).status == "improved"
    assert paired_verdict(base, head, min_change=0.05).status == "similar"  # below the minimum magnitude
    assert paired_verdict(base, base).status == "similar" and paired_verdict(base, base).pvalue == 1.0
    assert min_pairs(0.01, 5) == 8 and min_pairs(0.05, 5) == 6 and min_pairs(0.001, 5) == 11
    short = paired_verdict(base[:7], head[:7], min_change=0.02)  # 2/2**7 = 0.016 > 0.01: cannot be significant
    assert short.status == "insufficient data" and short.change == pytest.approx(0.03, abs=0.003)
    with pytest.raises(ValueError, match="differ in length"):
        paired_verdict(base, head[:3])


def _mixed_pairs(seed: int, paired: bool) -> list[tuple[list[float], list[float]]]:
    """Pairs of every kind the batch must split apart: sizes from 1 to 60, shifted or not, rounded
    to few levels (ties, zero log ratios), constant on both sides."""
    import random

    rng = random.Random(seed)
    pairs = []
    for i in range(200):
        n = rng.choice([1, 3, 5, 8, 9, 10, 12, 20, 51, 60])
        m = n if paired else rng.choice([n, 4, 9, 10])
        base = [1e-3 * (1 + rng.gauss(0, 0.03)) for _ in range(n)]
        shift = rng.choice([1.0, 1.02, 1.1, 0.9])
        head = [b * shift * (1 + rng.gauss(0, 0.01)) for b in base] if paired else \
            [1e-3 * shift * (1 + rng.gauss(0, 0.03)) for _ in range(m)]
        if i % 10 == 1:  # few levels: ties, and (paired) zero log ratios
            base, head = [round(v, 4) for v in base], [round(v, 4) for v in head]
        if i % 17 == 3:
            base, head = [2e-3] * n, [2e-3] * m
        pairs.append((base, head))
    return pairs


@pytest.mark.parametrize("seed", [1, 2])
def test_batched_rank_tests_equal_one_scipy_call_per_pair(seed: int) -> None:
    from scipy.stats import mannwhitneyu

    from pipeline.results.stats import rank_tests

    pairs = _mixed_pairs(seed, paired=False)
    expected = []
    for base, head in pairs:
        if min(base) == max(base) == min(head) == max(head):
            expected.append(1.0)
            continue
        p = float(mannwhitneyu(base, head, alternative="two-sided").pvalue)
        expected.append(1.0 if math.isnan(p) else p)
    got = rank_tests(pairs)
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-300)
    assert any(p < 0.01 for p in got) and any(p > 0.5 for p in got)  # both kinds of outcome were exercised


@pytest.mark.parametrize("seed", [1, 2])
def test_batched_paired_tests_equal_one_scipy_call_per_pair(seed: int) -> None:
    from scipy.stats import wilcoxon

    from pipeline.results.stats import paired_tests

    pairs = _mixed_pairs(seed, paired=True)
    expected = []
    for base, head in pairs:
        logs = [math.log(h / b) for b, h in zip(base, head, strict=True)]
        if all(v == 0 for v in logs):
            expected.append(1.0)
            continue
        p = float(wilcoxon(logs, alternative="two-sided").pvalue)
        expected.append(1.0 if math.isnan(p) else p)
    got = paired_tests(pairs)
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-300)
    assert any(p < 0.01 for p in got) and any(p > 0.5 for p in got)
    with pytest.raises(ValueError, match="equally many"):
        paired_tests([([1.0, 2.0], [1.0])])


def test_batched_verdicts_equal_one_verdict_per_pair() -> None:
    from pipeline.results.stats import paired_verdict, paired_verdicts, verdicts

    unpaired = _mixed_pairs(3, paired=False)
    assert verdicts(unpaired, min_change=0.05) == [verdict(b, h, min_change=0.05) for b, h in unpaired]
    paired = _mixed_pairs(4, paired=True)
    assert paired_verdicts(paired, min_change=0.02) == [paired_verdict(b, h, min_change=0.02) for b, h in paired]
    statuses = {v.status for v in verdicts(unpaired, min_change=0.05)}
    assert statuses == {"regressed", "improved", "similar", "insufficient data"}
