"""History analysis on the default branch: change points stored once, incremental == full,
direction and minimum magnitude per series, intended rebasing, the dashboard and regressions list."""

from __future__ import annotations

import math
from collections.abc import Iterator
import random

import numpy as np
import pytest
import sqlalchemy as sa
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from pipeline.results.analysis import changepoints
from pipeline.config import AnalysisSettings
from pipeline.results.store import analysis, ingest, queries, triage
from pipeline.results.store.db import session_scope
from pipeline.results.store.history import default_branch_chain
from pipeline.results.store.models import Case, ChangePoint, Repository, Series, TriageEvent

from tests.helpers import factories as f
from tests.helpers.stores import built_engine, seed

SETTINGS = AnalysisSettings()
STEPS = {0: 1e-3, 20: 1.2e-3, 40: 1e-3}
"""first commit of each level -> level (seconds): a regression at main-20, fixed at main-40"""
N = 60


def level(i: int) -> float:
    return STEPS[max(k for k in STEPS if k <= i)]


def main(i: int) -> str:
    return f"main-{i}"


def record_main(s: Session, n: int = N, start: int = 0) -> None:
    """main-0 <- main-1 <- ... recorded as default-branch commits (after seeded's c0..c3)."""
    ingest.record_commits(s, repository=f.REPO, commits=[
        f.commit(main(i), *([main(i - 1)] if i else [3]), minutes=10 + i, branch="main") for i in range(start, n)])


def upload_main(s: Session, i: int, analysis_settings: object = "default") -> None:
    noise = random.Random(i).gauss(0, 0.004)
    f.upload(s, main(i), [f.ok(f.GEMM, f.series_samples(level(i) * (1 + noise)))], kind="push",
             analysis=analysis_settings)


def build_stepped(seeded: Engine) -> Engine:
    """GEMM on cpu-x86-64 along main-0..main-59 (0.4% noise), +20% at main-20 and back at main-40,
    each commit uploaded (and so analysed incrementally) as it arrives."""
    with session_scope(seeded) as s:
        record_main(s)
    for i in range(N):
        with session_scope(seeded) as s:
            upload_main(s, i)
    return seeded


@pytest.fixture
def stepped(seeded: Engine) -> Engine:
    """`build_stepped`'s store, built in this process (its analysis' tail in memory, as after uploads)."""
    return build_stepped(seeded)


def _build_seeded_stepped(engine: Engine) -> None:
    build_stepped(seed(engine))


@pytest.fixture(params=["sqlite", "postgresql"])
def copied_stepped(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """A copy of `build_stepped`'s store, built once per test process and store, for the tests that add
    no results to its main branch (to this process the copy is a store it has not analysed yet)."""
    with built_engine(request.param, tmp_path_factory.mktemp("store"), "stepped", _build_seeded_stepped) as (engine, _):
        yield engine


def _points(s: Session) -> list[tuple[str, str, str, str]]:
    """(before sha, after sha, direction, state) of every change point, oldest first."""
    rows = queries.series_change_points(s, _series_id(s))
    return [(r.before_sha, r.after_sha, r.direction, r.state) for r in rows]


def _series_id(s: Session) -> int:
    return s.scalar(sa.select(Series.id)) or 0


def test_default_branch_chain_follows_first_parents_of_the_head(copied_stepped: Engine) -> None:
    with session_scope(copied_stepped) as s:
        ingest.record_commits(s, repository=f.REPO, commits=[
            f.commit("feature", main(59), minutes=100, branch="feature"),
            f.commit("merge", main(59), "feature", minutes=101, branch="main")])
        repo_id = s.scalar(sa.select(Repository.id))
        chain = [c.sha for c in default_branch_chain(s, repo_id)]
    assert chain[-1] == f.sha("merge") and f.sha("feature") not in chain
    assert chain[:4] == [f.sha(i) for i in range(4)] and chain[4] == f.sha(main(0))


def test_a_step_gives_one_change_point_at_the_right_commit_range(copied_stepped: Engine) -> None:
    with session_scope(copied_stepped) as s:
        assert _points(s) == [
            (f.sha(main(19)), f.sha(main(20)), "regression", "needs triage"),
            (f.sha(main(39)), f.sha(main(40)), "improvement", "needs triage"),
        ]
        first = queries.series_change_points(s, _series_id(s))[0]
        assert first.magnitude == pytest.approx(0.2, abs=0.02) and first.pvalue <= SETTINGS.max_pvalue
        assert first.before_level == pytest.approx(1e-3, rel=0.02) and first.open
        suspected, confirmed = triage.events(s, first.id)  # seen on its first slow commit, confirmed later
        assert (suspected.state, suspected.who) == (confirmed.state, confirmed.who) == ("needs triage",
                                                                                       analysis.ANALYSIS_WHO)
        assert suspected.note.startswith("suspected: regression") and confirmed.note.startswith("confirmed")
        assert first.lifecycle == "confirmed" and first.reason == "" and first.retracted_at is None
        series = s.get(Series, _series_id(s))
        assert series is not None and series.history_points == N and series.analyzed_at is not None


def test_reanalysis_is_idempotent_and_incremental_equals_full(copied_stepped: Engine) -> None:
    with session_scope(copied_stepped) as s:
        incremental = _points(s)
        before = f.snapshot(s)
        assert analysis.analyze_series(s, _series_id(s), SETTINGS).new_change_points == 0
        assert analysis.reanalyze_all(s, SETTINGS).new_change_points == 0
    with session_scope(copied_stepped) as s:
        after = f.snapshot(s)
        assert after["change_points"] == before["change_points"]
        assert after["triage_events"] == before["triage_events"]
        s.execute(sa.delete(TriageEvent))
        s.execute(sa.delete(ChangePoint))
    with session_scope(copied_stepped) as s:
        summary = analysis.reanalyze_all(s, SETTINGS)
        assert summary.new_change_points == 2
        assert _points(s) == incremental


def test_an_upload_again_and_a_pull_request_commit_add_nothing(stepped: Engine) -> None:
    with session_scope(stepped) as s:
        before = f.row_counts(s)["change_points"]
        ingest.record_commits(s, repository=f.REPO, commits=[f.commit("pr", main(59), minutes=200, branch="feature")])
        f.upload(s, "pr", [f.ok(f.GEMM, f.series_samples(5e-3))], kind="pr")
        assert f.row_counts(s)["change_points"] == before
        assert s.get(Series, _series_id(s)).history_points == N  # type: ignore[union-attr]


def test_direction_and_minimum_magnitude_come_from_the_series(copied_stepped: Engine) -> None:
    with session_scope(copied_stepped) as s:
        s.execute(sa.delete(TriageEvent))
        s.execute(sa.delete(ChangePoint))
        series = s.get(Series, _series_id(s))
        assert series is not None
        series.lower_is_better = False
        analysis.analyze_series(s, series.id, SETTINGS)
        assert [d for _, _, d, _ in _points(s)] == ["improvement", "regression"]  # higher is better
        s.execute(sa.delete(TriageEvent))
        s.execute(sa.delete(ChangePoint))
        series.min_magnitude = 0.5
        analysis.analyze_series(s, series.id, SETTINGS)
        assert _points(s) == []


def test_intended_rebases_the_series(copied_stepped: Engine) -> None:
    with session_scope(copied_stepped) as s:
        series_id = _series_id(s)
        regression, improvement = queries.series_change_points(s, series_id)
        assert queries.dashboard(s).counts == {"regressed": 1, "suspected": 0, "improved": 0, "stable": 0,
                                               "no data": 0}
        assert [r.id for r in queries.list_regressions(s)] == [regression.id]
        assert queries.series_baseline(s, series_id) is None

        # the later change accepted as the new level: the regression before it no longer counts
        triage.triage(s, change_point_id=improvement.id, state="intended", who="alice", note="new tiling")
        assert queries.list_regressions(s) == []
        assert queries.dashboard(s).counts["stable"] == 1
        baseline = queries.series_baseline(s, series_id)
        assert baseline is not None and baseline.sha == f.sha(main(40))
        assert baseline.level == pytest.approx(1e-3, rel=0.02)
        assert [cp.open for cp in queries.series_change_points(s, series_id)] == [False, False]

        triage.triage(s, change_point_id=improvement.id, state="needs triage", who="bob")
        assert [r.id for r in queries.list_regressions(s)] == [regression.id]
        triage.triage(s, change_point_id=regression.id, state="intended", who="bob")
        assert queries.list_regressions(s) == []
        assert queries.list_regressions(s, state="intended")[0].id == regression.id
        assert queries.dashboard(s).counts["improved"] == 1  # the improvement after the new baseline is open


def test_dashboard_groups_by_family_and_device_class(stepped: Engine) -> None:
    with session_scope(stepped) as s:
        f.upload(s, main(59), [f.ok(f.GEMM, f.series_samples(1e-3))], device_class="other-cpu", kind="push")
        ingest.record_commits(s, repository=f.REPO, commits=[f.commit("pr", main(59), minutes=200, branch="feature")])
        f.upload(s, "pr", [f.ok(f.CONV, f.series_samples(1e-3))], kind="pr")  # a series with no default-branch data
        board = queries.dashboard(s)
        groups = {(g.family, g.device_class): g.counts for g in board.groups}
        assert groups[("gemm", f.DEVICE_CLASS)]["regressed"] == 1
        assert groups[("gemm", "other-cpu")]["stable"] == 1
        assert groups[("conv", f.DEVICE_CLASS)]["no data"] == 1
        assert queries.dashboard(s, device_class="other-cpu").counts == {
            "regressed": 0, "suspected": 0, "improved": 0, "stable": 1, "no data": 0}
        assert queries.list_regressions(s, device_class="other-cpu") == []
        assert len(queries.list_regressions(s, family="gemm")) == 1
        assert queries.list_regressions(s, family="conv") == []


# --- noise learned from history (the verdict's threshold) ---------------------------------------

def test_run_to_run_noise_is_learned_from_the_default_branch(copied_stepped: Engine) -> None:
    from pipeline.results.analysis.stats import run_to_run_noise
    from pipeline.results.store.models import Measurement

    with session_scope(copied_stepped) as s:
        series = s.get(Series, _series_id(s))
        assert series is not None and series.noise_unpaired is not None and series.noise_paired is None
        medians = [m for m, in s.execute(sa.select(Measurement.median).order_by(Measurement.id))][-analysis.NOISE_HISTORY:]
        assert series.noise_unpaired == pytest.approx(run_to_run_noise(medians, [None] * len(medians)))
        # 0.4 % gaussian noise per run; the +-20 % steps of the history are outliers it ignores
        assert 0.002 < series.noise_unpaired < 0.007


def test_paired_noise_is_learned_from_aa_calibrations(seeded: Engine) -> None:
    from pipeline.config import CompareSettings
    from pipeline.results.store.compare import compare

    base = [1e-3 * (1 + 0.01 * (i % 5)) for i in range(15)]
    offsets = [0.01, -0.01, 0.02, -0.02, 0.005, -0.005]
    settings = CompareSettings(paired_min_change=0.02)

    def gemm_noise(s: Session) -> float | None:
        return s.scalar(sa.select(Series.noise_paired).where(Series.id == _series_id(s)))

    with session_scope(seeded) as s:
        # a paired result of different binaries is no calibration
        f.run_and_upload(s, 3, [f.paired_ok(f.GEMM, f.sha(2), base, [b * 1.3 for b in base], rounds=[3] * 5,
                                            binary="new", base_binary="old")])
        assert gemm_noise(s) is None
        for i, offset in enumerate(offsets):  # A/A: identical binaries in both slots, each run its own offset
            f.run_and_upload(s, 3, [f.paired_ok(f.GEMM, f.sha(2), base, [b * (1 + offset) for b in base],
                                                rounds=[3] * 5, binary="same", base_binary="same")])
            if i < 4:
                assert gemm_noise(s) is None, "fewer than 5 calibrations: unknown"
        noise = gemm_noise(s)
        # |log(1 + offset)|: 0.005, 0.005, 0.00995, 0.01005, 0.0198, 0.0202 -> median 0.0100 -> x 1.4826
        assert noise == pytest.approx(1.4826 * 0.5 * (abs(math.log(0.99)) + math.log(1.01)), rel=1e-6)
        # a later +4 % paired change (every round alike: highly significant) is under 3 x 1.48 % = 4.4 %
        f.run_and_upload(s, 3, [f.paired_ok(f.GEMM, f.sha(2), base, [b * 1.04 for b in base], rounds=[3] * 5,
                                            binary="faster?", base_binary="same")])
        row = next(r for r in compare(s, repository=f.REPO, head_sha=f.sha(3), device_class=f.DEVICE_CLASS,
                                      settings=settings).rows if str(r.case_id) == f.GEMM)
        assert row.change == pytest.approx(0.04) and row.pvalue is not None and row.pvalue < 1e-6
        # not different, and not the same either: significant at more than half the threshold (EVIDENT_SHARE)
        assert row.threshold == pytest.approx(3 * noise) and row.status == "inconclusive"
        # without the learned noise, the floor (2 %) would have called it
        assert compare(s, repository=f.REPO, head_sha=f.sha(3), device_class=f.DEVICE_CLASS,
                       settings=settings.model_copy(update={"noise_factor": 0.0})).rows[0].status == "regressed"


def _lognormal(seed: int, s: float, n: int) -> np.ndarray:
    return 100 * np.exp(np.random.default_rng(seed).normal(0, s, n))


def _kinds(n: int) -> dict[str, np.ndarray]:
    """Series kinds of issue 13, n commits each, levels around 100 (scaled to seconds below)."""
    step = _lognormal(5, 0.01, n)
    step[40:] *= 1.1
    slow_runs = np.concatenate([_lognormal(0, 0.005, 30), [130.0, 145.0, 100.0], _lognormal(1, 0.005, n - 33)])
    stairs = _lognormal(0, 0.01, n)
    stairs[40:] *= 1.2
    stairs[65:] *= 1.1
    drift = 100 * (1 + 0.04 * np.arange(n) / n) * np.exp(np.random.default_rng(2).normal(0, 0.005, n))
    fixed = _lognormal(6, 0.01, n)   # a slowdown, fixed 25 commits later
    fixed[30:55] *= 1.15
    heavy = 100 * np.exp(0.01 * np.random.default_rng(7).standard_t(3, n))   # Student-t 3 noise, a step
    heavy[50:] *= 1.08
    clock = np.random.default_rng(8)   # two clock states, a step of three times their gap
    bimodal = 100 * np.where(clock.random(n) < 0.3, 1.04, 1.0) * np.exp(clock.normal(0, 0.005, n))
    bimodal[60:] *= 1.12
    outliers = _lognormal(9, 0.01, n)   # slow runs scattered over a step
    outliers[[12, 37, 38, 71, n - 1]] *= 1.6
    outliers[45:] *= 1.1
    return {"step": step, "young-false-alarm": _lognormal(0, 0.02, n), "two-slow-runs": slow_runs,
            "staircase": stairs, "drift": drift, "slowdown-fix": fixed, "heavy-tails": heavy, "bimodal": bimodal,
            "outliers": outliers, "noise-5pct": _lognormal(10, 0.05, n)}


def test_online_equals_batch_after_every_commit(seeded: Engine) -> None:
    """Issue 13: the store fed one commit at a time (ingest_result) holds, after every commit,
    batch `analyse`'s confirmed change points of the history so far, and beside them only points it
    confirmed earlier that still hold (issue 31's hysteresis: `changepoints.holds`); what it
    confirmed and later data refuted is retracted with a reason, not deleted, its triage history kept."""
    n = 100
    kinds = _kinds(n)
    cases = {kind: f"gemm/{kind}/64x64x64/f32/iree" for kind in kinds}
    with session_scope(seeded) as s:
        ingest.ingest_manifest(s, manifest=f.manifest(f.sha(0), [f.built_entry(c) for c in cases.values()]),
                               path="/bundles/kinds")
        record_main(s, n)
    ever_confirmed: dict[str, set[str]] = {kind: set() for kind in kinds}
    for i in range(n):
        with session_scope(seeded) as s:
            f.upload(s, main(i), [f.ok(cases[k], f.series_samples(kinds[k][i] * 1e-5)) for k in kinds], kind="push")
        with session_scope(seeded) as s:
            for kind, values in kinds.items():
                series_id = s.scalar(sa.select(Series.id).join(Case).where(Case.case_id == cases[kind]))
                assert series_id is not None
                rows = queries.series_change_points(s, series_id)
                confirmed = [r for r in rows if r.lifecycle == "confirmed"]
                history = values[:i + 1]
                batch = changepoints.analyse(history, window=SETTINGS.window, max_pvalue=SETTINGS.max_pvalue,
                                             min_magnitude=SETTINGS.min_magnitude, min_size=SETTINGS.min_size,
                                             confirm_size=SETTINGS.confirm_size,
                                             confirm_pvalue=SETTINGS.confirm_pvalue)
                batch_shas = [f.sha(main(cp.index)) for cp in batch.confirmed]
                assert set(batch_shas) <= {r.after_sha for r in confirmed}, (kind, i)
                for r in confirmed:
                    if r.after_sha not in batch_shas:   # held: confirmed before, and it still stands out
                        assert r.after_sha in ever_confirmed[kind], (kind, i)
                        index = [f.sha(main(j)) for j in range(i + 1)].index(r.after_sha)
                        standing = [f.sha(main(j)) for j in range(i + 1)]
                        neighbours = [standing.index(o.after_sha) for o in rows
                                      if o.lifecycle != "retracted" and o.after_sha != r.after_sha]
                        assert changepoints.holds(history, index, r.magnitude > 0, neighbours=neighbours,
                                                  outliers=batch.outliers, min_magnitude=SETTINGS.min_magnitude,
                                                  pvalue=SETTINGS.hold_pvalue), (kind, i)
                ever_confirmed[kind] |= {r.after_sha for r in confirmed}
                for r in rows:
                    if r.lifecycle == "retracted":
                        assert r.reason and r.retracted_at is not None and not r.open
    with session_scope(seeded) as s:
        retracted = s.scalars(sa.select(ChangePoint).where(ChangePoint.lifecycle == "retracted")).all()
        assert retracted, "some prefix confirmed or suspected what later data refuted"
        for row in retracted:
            events = triage.events(s, row.id)
            assert events[0].note.startswith(("suspected", "confirmed")) and events[-1].note.startswith("retracted: ")
        stairs_id = s.scalar(sa.select(Series.id).join(Case).where(Case.case_id == cases["staircase"]))
        assert [r.after_sha for r in queries.series_change_points(s, stairs_id) if r.lifecycle == "confirmed"] == [
            f.sha(main(40)), f.sha(main(65))]
        slow_id = s.scalar(sa.select(Series.id).join(Case).where(Case.case_id == cases["two-slow-runs"]))
        (slow,) = queries.series_change_points(s, slow_id)  # suspected at main-30, retracted at main-32
        assert slow.lifecycle == "retracted" and "outlier" in slow.reason and slow.after_sha == f.sha(main(30))
        assert not ever_confirmed["two-slow-runs"]
        assert all(r.series_id != slow_id for r in queries.list_regressions(s))
        assert [r.id for r in queries.list_regressions(s, lifecycle="retracted") if r.series_id == slow_id] == [slow.id]


def test_fault_1_the_store_does_not_keep_a_young_false_alarm(seeded: Engine) -> None:
    """Issue 13, fault 1 (seed 0, s 0.02, n 60): the store fed one commit at a time kept the young
    false alarm at commit 39 forever, while batch analysis of the 60 commits reports nothing. Now
    what a prefix reported (here main-38, about +2 %, from main-49 to main-50) is retracted when later
    commits refute it, and it was never confirmed (issue 31): the store ends with batch's answer,
    nothing standing, the point recorded with its reason and history."""
    x = _lognormal(0, 0.02, 60)
    assert changepoints.detect(x, min_magnitude=SETTINGS.min_magnitude) == []
    with session_scope(seeded) as s:
        record_main(s, 60)
    confirmed_at: list[int] = []
    for i in range(60):
        with session_scope(seeded) as s:
            f.upload(s, main(i), [f.ok(f.GEMM, f.series_samples(x[i] * 1e-5))], kind="push")
            if any(r.lifecycle == "confirmed" for r in queries.series_change_points(s, _series_id(s))):
                confirmed_at.append(i)
    # issue 31: the detector reported the young point at main-38 for a few commits (49, 50), under the
    # confirmation rule (8 commits from it, p <= 1e-6): suspected then, never confirmed, so never alerted
    assert confirmed_at == []
    with session_scope(seeded) as s:
        rows = queries.series_change_points(s, _series_id(s))
        # (and a point suspected at main-46 for one commit, dropped by the next: retracted too)
        assert all(r.lifecycle == "retracted" and not r.open for r in rows), rows
        (row,) = [r for r in rows if r.after_sha == f.sha(main(38))]
        assert (row.after_sha, row.direction, row.lifecycle) == (f.sha(main(38)), "regression", "retracted")
        assert row.reason.startswith("not supported by the 14 commits from it") and not row.open
        notes = [e.note for e in triage.events(s, row.id)]
        assert notes[0].startswith("suspected: regression") and notes[-1].startswith("retracted: not supported")
        assert not any(n.startswith("confirmed") for n in notes)
        assert queries.list_regressions(s) == [] and queries.dashboard(s).counts["regressed"] == 0


def test_a_suspected_regression_shows_at_once_and_is_confirmed_or_retracted(stepped: Engine) -> None:
    with session_scope(stepped) as s:
        _, improvement = queries.series_change_points(s, _series_id(s))
        triage.triage(s, change_point_id=improvement.id, state="intended", who="alice")  # nothing open before
        assert queries.dashboard(s).counts["stable"] == 1
        record_main(s, N + 4, start=N)
        f.upload(s, main(N), [f.ok(f.GEMM, f.series_samples(1.5e-3))], kind="push")
        (suspected,) = [r for r in queries.list_regressions(s) if r.lifecycle == "suspected"]
        assert suspected.after_sha == f.sha(main(N)) and suspected.magnitude == pytest.approx(0.5, abs=0.02)
        assert queries.dashboard(s).counts["suspected"] == 1 and queries.dashboard(s).counts["regressed"] == 0
        f.upload(s, main(N + 1), [f.ok(f.GEMM, f.series_samples(1.0e-3))], kind="push")  # back to normal
        row = queries.get_change_point(s, suspected.id)
        assert row is not None and row.lifecycle == "retracted" and "outlier" in row.reason
        assert queries.dashboard(s).counts["suspected"] == 0
        record_main(s, N + 10, start=N + 4)
        for i in range(N + 2, N + 9):  # a slowdown that stays: suspected, then confirmed on its eighth commit
            f.upload(s, main(i), [f.ok(f.GEMM, f.series_samples(1.3e-3))], kind="push")
            assert [r.lifecycle for r in queries.list_regressions(s)] == ["suspected"], i
        f.upload(s, main(N + 9), [f.ok(f.GEMM, f.series_samples(1.3e-3))], kind="push")
        (confirmed,) = queries.list_regressions(s)
        assert confirmed.lifecycle == "confirmed" and confirmed.after_sha == f.sha(main(N + 2))
        assert queries.dashboard(s).counts["regressed"] == 1


def test_commits_of_one_second_keep_their_ancestry_order_in_change_points_and_baselines(seeded: Engine) -> None:
    """main-0..main-59 all committed in one second (a rebase): the change points, the series' baseline
    and what stays open follow ancestry, as with distinct commit times."""
    with session_scope(seeded) as s:
        ingest.record_commits(s, repository=f.REPO, commits=[
            f.commit(main(i), *([main(i - 1)] if i else [3]), minutes=10, branch="main") for i in range(N)])
    for i in reversed(range(N)):   # uploaded newest first: storage order says nothing either
        with session_scope(seeded) as s:
            upload_main(s, i)
    with session_scope(seeded) as s:
        series_id = _series_id(s)
        assert _points(s) == [(f.sha(main(19)), f.sha(main(20)), "regression", "needs triage"),
                              (f.sha(main(39)), f.sha(main(40)), "improvement", "needs triage")]
        regression, improvement = queries.series_change_points(s, series_id)
        triage.triage(s, change_point_id=regression.id, state="intended", who="bob")
        assert queries.series_baseline(s, series_id).sha == f.sha(main(20))  # type: ignore[union-attr]
        assert queries.dashboard(s).counts["improved"] == 1   # the improvement after it is still open
        triage.triage(s, change_point_id=improvement.id, state="intended", who="alice")
        assert queries.series_baseline(s, series_id).sha == f.sha(main(40))  # type: ignore[union-attr]
