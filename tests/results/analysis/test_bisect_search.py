"""The bisection's search on levels with a known answer: where the change is, how many probes it
takes, what it says when commits are skipped."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from pipeline.results.analysis.bisect_search import BASE, Level, Plan, combine, differs, plan, smallest_jump, verdict


def run_search(n: int, level_at: Callable[..., float | None], *, half_width: float = 0.005,
               min_share: float = 0.2, floor: float = 0.02, confirm: bool = False,
               drift: float = 0.0) -> tuple[Plan, list[int]]:
    """Probe as `plan` asks (None from `level_at`: that commit cannot be built) until it is done;
    the final plan and the positions probed, in order. With `confirm`, a finding at several places
    is confirmed by second readings (`level_at(position, reading)`), combined as the service does.
    `drift`: the device's speed ratio of two binaries moves from job to job, the k-th job reading a
    level of log ratio L as L x (1 + drift x k); a binary paired with itself stays at 0."""
    readings: dict[int, list[Level]] = {}
    skipped: set[int] = set()
    probed: list[int] = []
    while True:
        levels = {p: combine(r) for p, r in readings.items()}
        bad = levels.get(n)
        jump = smallest_jump(floor, min_share, bad)
        repeated = {p for p in probed if probed.count(p) >= 2} if confirm else None
        step = plan(n, levels, skipped=skipped, min_jump=jump, repeated=repeated)
        if step.done:
            return step, probed
        for p in step.probes:
            probed.append(p)
            value = level_at(p, probed.count(p)) if confirm else level_at(p)
            if value is None:
                skipped.add(p)
            else:
                value = math.expm1(math.log1p(value) * (1 + drift * len(probed)))
                readings.setdefault(p, []).append(Level(value, value - half_width, value + half_width))


def test_a_3x_slowdown_at_commit_11_of_16_is_found_after_the_bad_commit_and_four_probes() -> None:
    # positions 0..15: commit 1 (the base) .. commit 16 (bad); commit 11 is position 10
    found, probed = run_search(15, lambda p: 2.0 if p >= 10 else 0.0)
    assert [c.position for c in found.culprits] == [10] and found.culprits[0].jump == pytest.approx(2.0)
    assert probed[0] == 15 and len(probed) == 5 and not found.unresolved


@pytest.mark.parametrize("culprit", range(1, 16))
def test_every_position_of_a_16_commit_range_takes_at_most_ceil_log2_probes(culprit: int) -> None:
    found, probed = run_search(15, lambda p: 0.5 if p >= culprit else 0.0)
    assert [c.position for c in found.culprits] == [culprit]
    assert len(probed) <= 1 + math.ceil(math.log2(15))


def test_a_change_spread_over_two_commits_of_5_percent_each_names_both() -> None:
    found, probed = run_search(15, lambda p: (0.05 if p >= 5 else 0.0) + (0.05 if p >= 10 else 0.0),
                               half_width=0.004, floor=0.02)
    assert [(c.position, round(c.jump, 3)) for c in found.culprits] == [(5, 0.05), (10, 0.05)]
    assert len(probed) <= 9


def noisy_first_job(position: int, value: float, off: float) -> Callable[[int, int], float]:
    """A 3x step at `position` whose first job there read `off` too high (a loaded machine)."""
    return lambda p, reading: (value + off if (p, reading) == (position, 1) else value) if p >= position else 0.0


def test_one_noisy_job_makes_a_step_look_spread_and_a_second_reading_undoes_it() -> None:
    # the CI failure this came from: +210 % read at commit 11, +158 % at the bad commit: "spread" (on log
    # ratios that one is within 20 % of the whole move now; a job further off, +228 %, still fakes a spread)
    assert len(run_search(15, lambda p: noisy_first_job(10, 1.58, 0.52)(p, 1))[0].culprits) == 1
    unconfirmed, _ = run_search(15, lambda p: noisy_first_job(10, 1.58, 0.70)(p, 1))
    assert [c.position for c in unconfirmed.culprits] == [10, 11]
    found, probed = run_search(15, noisy_first_job(10, 1.58, 0.70), confirm=True)
    assert [c.position for c in found.culprits] == [10] and not found.unresolved
    assert sorted(p for p in set(probed) if probed.count(p) == 2) == [9, 10, 11]   # the ends, once more each
    assert len(probed) <= 5 + 3


def test_a_spread_change_stays_spread_when_its_ends_are_read_again() -> None:
    found, probed = run_search(15, lambda p, reading: (0.05 if p >= 5 else 0.0) + (0.05 if p >= 10 else 0.0),
                               half_width=0.004, floor=0.02, confirm=True)
    assert [(c.position, round(c.jump, 3)) for c in found.culprits] == [(5, 0.05), (10, 0.05)]
    assert all(probed.count(p) == 2 for p in (4, 5, 9, 10)) and len(probed) <= 9 + 4


def test_a_confirming_reading_that_is_still_queued_is_waited_for() -> None:
    levels = {15: Level(1.0, 0.99, 1.01), 8: Level(0.5, 0.49, 0.51), 7: Level(0.0, -0.01, 0.01),
              9: Level(0.5, 0.49, 0.51), 14: Level(0.5, 0.49, 0.51), 12: Level(0.5, 0.49, 0.51),
              13: Level(0.5, 0.49, 0.51)}
    asked = plan(15, levels, min_jump=0.1, repeated=set())
    assert sorted(asked.probes) == [7, 8, 14, 15] and not asked.culprits
    waiting = plan(15, levels, min_jump=0.1, repeated={8, 14}, pending={7, 15})
    assert waiting.waiting and waiting.probes == [] and not waiting.done
    done = plan(15, levels, min_jump=0.1, repeated={7, 8, 14, 15})
    assert [c.position for c in done.culprits] == [8, 15] and done.done


def test_combined_readings_hold_every_interval() -> None:
    joined = combine([Level(2.1, 2.08, 2.12), Level(1.6, 1.58, 1.62)])
    assert joined.change == pytest.approx(1.85) and (joined.low, joined.high) == (1.58, 2.12)
    assert combine([Level(0.1, 0.0, 0.2)]) == Level(0.1, 0.0, 0.2)
    with pytest.raises(ValueError):
        combine([])


def test_noise_wider_than_a_step_does_not_invent_a_culprit() -> None:
    # a 3 % step measured with +-5 % intervals: the search cannot separate it and says so by finding nothing
    found, probed = run_search(15, lambda p: 0.03 if p >= 7 else 0.0, half_width=0.05)
    assert found.culprits == [] and found.unresolved == [] and probed == [15]


def test_an_unbuildable_probe_is_stepped_over_and_the_culprit_still_found() -> None:
    found, probed = run_search(15, lambda p: None if p == 7 else (2.0 if p >= 10 else 0.0))
    assert probed[:2] == [15, 7] and 7 not in [c.position for c in found.culprits]
    assert [c.position for c in found.culprits] == [10] and not found.unresolved


def test_an_unbuildable_commit_just_before_the_culprit_leaves_both_named() -> None:
    found, _ = run_search(15, lambda p: None if p == 9 else (2.0 if p >= 10 else 0.0))
    assert found.culprits == []
    assert [(u.low, u.high, u.skipped) for u in found.unresolved] == [(8, 10, (9,))]


def test_the_bad_commit_comes_first_and_alone_and_a_pending_probe_is_waited_for() -> None:
    assert plan(15, {}, min_jump=0.02).probes == [15]
    waiting = plan(15, {}, pending={15}, min_jump=0.02)
    assert waiting.probes == [] and waiting.waiting and not waiting.done
    middle = plan(15, {15: Level(1.0, 0.99, 1.01)}, pending={7}, min_jump=0.2)
    assert middle.probes == [] and middle.waiting


def test_differs_needs_the_minimum_jump_and_more_than_the_intervals_combined() -> None:
    assert differs(BASE, Level(0.10, 0.09, 0.11), 0.05)
    assert not differs(BASE, Level(0.03, 0.02, 0.04), 0.05)            # under the minimum jump
    assert not differs(Level(0.0, -0.1, 0.1), Level(0.12, 0.02, 0.22), 0.05)  # within the intervals' width
    assert verdict(Level(0.0, -0.01, 0.01), Level(1.0, 0.99, 1.01), 0.2) == "old level"
    assert verdict(Level(0.98, 0.97, 0.99), Level(1.0, 0.99, 1.01), 0.2) == "new level"
    assert verdict(Level(0.5, 0.49, 0.51), Level(1.0, 0.99, 1.01), 0.2) == "in between"
    with pytest.raises(ValueError, match="at least one commit"):
        plan(0, {}, min_jump=0.02)


def _spread_with_one_high_reading(position: int, reading: int = 1) -> float:
    """CI's VM (e2e test_bisect): a change spread over commit 6 (position 5) and commit 11 (position 10) of
    a 16-commit range, read +143 % and +230 %; commit 8 (position 7, commit 6's binary) read +187 % the first
    time, which made it alike both commit 6 and the bad commit (min_jump: 20 % of +230 % = 0.46)."""
    if position >= 10:
        return 2.297
    if position >= 5:
        return 1.865 if position == 7 and reading == 1 else 1.432
    return 0.001


def test_a_reading_alike_both_its_neighbours_while_they_are_apart_does_not_hide_a_move() -> None:
    """The bisection of CI's run stopped at commit 6, '+143 % of +230 %': commit 8's reading hid commit
    11's part. Read again it no longer does; and where a second reading says the same, the range around
    it is searched as if it had none."""
    found, probed = run_search(15, _spread_with_one_high_reading, half_width=0.05, confirm=True)
    assert [c.position for c in found.culprits] == [5, 10], (found, probed)
    assert probed.count(7) == 2

    def always_high(position: int, reading: int = 1) -> float:
        return _spread_with_one_high_reading(position, 1)
    found, probed = run_search(15, always_high, half_width=0.05, confirm=True)
    assert [c.position for c in found.culprits][-1] == 10, (found, probed)
    found, probed = run_search(15, always_high, half_width=0.05)
    assert [c.position for c in found.culprits][-1] == 10, (found, probed)


def test_a_level_alike_its_neighbours_that_are_alike_asks_for_nothing_more() -> None:
    levels = {7: Level(0.30, 0.28, 0.32), 15: Level(0.31, 0.29, 0.33)}
    assert plan(15, {3: Level(0.0, -0.01, 0.01), **levels}, min_jump=0.06, repeated=set()).probes == [5]
    settled = {3: Level(0.0, -0.01, 0.01), 4: Level(0.29, 0.27, 0.31), **levels}
    assert plan(15, settled, min_jump=0.06, repeated=set()).done


def test_a_spread_change_is_found_on_a_device_whose_speed_ratio_drifts_from_job_to_job() -> None:
    """A loaded 2-core VM (e2e test_bisect beside two CPU burners): the paired level of one binary read
    about 15 % higher in log ratio late in a search than early (commit 12: +173 % then +196 %; commits
    13-15: +216-223 % against the bad commit's first +171 %). On the change itself the top level's drift
    is more than its share of the log ratio (x R / (R - 1) x ln R): over 20 % of the whole change, and the
    search ran to its 16-job limit. Here: commit 6 x2.46 and commit 11 x1.96 more (the test's tiles)."""
    def spread(position: int, reading: int = 1) -> float:
        return 3.82 if position >= 10 else 1.46 if position >= 5 else 0.0
    for drift in (0.0, 0.01, 0.015):   # 0.015: +18 % over 12 jobs (on the change itself: 18 jobs, no answer)
        found, probed = run_search(15, spread, half_width=0.03, confirm=True, drift=drift)
        assert [c.position for c in found.culprits] == [5, 10] and not found.unresolved, (drift, found, probed)
        assert len(probed) <= 14, (drift, probed)
