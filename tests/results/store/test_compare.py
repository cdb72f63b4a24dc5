"""Finding the base along first parents, and the per-case verdicts of a comparison."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import Engine

from pipeline.config import CompareSettings
from pipeline.results.store import ingest
from pipeline.results.store.compare import (
    CompareError,
    choose_base,
    compare,
    compare_all,
    find_base,
    overall_verdict,
)
from pipeline.results.store.db import session_scope

from tests.helpers import factories as f

ATTN = "attn/sdpa/8x1024x64/bf16/triton"
GATHER = "gather/rows/4096x128/f32/iree"
SCATTER = "scatter/rows/4096x128/f32/iree"
BROKEN = "gemm/broken/64x64x64/f32/iree"
SETTINGS = CompareSettings(min_change=0.05, max_pvalue=0.01, min_samples=5, ancestor_walk=50)


@pytest.fixture
def history(seeded: Engine) -> Engine:
    """c0 <- c1 <- c2 <- head, and side (child of c0) merged into head as its second parent.
    Results on cpu-x86-64: c0 and side; on other-cpu: c2; c1 has none."""
    with session_scope(seeded) as s:
        ingest.record_commits(s, repository=f.REPO, commits=[
            f.commit("side", 0, minutes=5), f.commit("head", 2, "side", minutes=10)])
        ingest.ingest_manifest(s, manifest=f.manifest(f.sha(0), [f.built_entry(c) for c in (ATTN, GATHER, SCATTER, BROKEN)],
                                                      suite_digest="e" * 40), path="/bundles/0b")
        f.run_and_upload(s, 0, [
            f.ok(f.GEMM, f.series_samples(1e-3)), f.ok(f.CONV, f.series_samples(1e-3)),
            f.ok(ATTN, f.series_samples(2e-3)), f.ok(SCATTER, f.series_samples(1e-3, n=3)),
            f.ok(BROKEN, f.series_samples(1e-3))])
        f.run_and_upload(s, 2, [f.ok(f.GEMM, f.series_samples(5e-3))], device_class="other-cpu")
        f.run_and_upload(s, "side", [f.ok(f.GEMM, f.series_samples(9e-3))])
        # the head's bundle also built CONV for vulkan:valhall, which the cpu job reports skipped
        ingest.ingest_manifest(s, manifest=f.manifest(f.sha("head"), [f.built_entry(f.CONV, target="vulkan:valhall")]),
                               path="/bundles/head")
        f.run_and_upload(s, "head", [
            f.ok(f.GEMM, f.series_samples(1.2e-3)),                  # +20%, separated: regressed
            f.ok(f.CONV, f.series_samples(1.001e-3, spread=0.02)),   # +0.1%, overlapping: similar
            f.ok(ATTN, f.series_samples(1e-3)),                      # -50%: improved
            f.ok(GATHER, f.series_samples(1e-3)),                    # not measured at the base: no baseline
            f.ok(SCATTER, f.series_samples(3e-3)),                   # base has 3 samples: insufficient data
            f.failed(BROKEN, "wrong"),                               # errored
            f.failed("conv/resnet-3x3/1x64x56x56/f32/iree", "skipped", target="vulkan:valhall"),  # left out
        ])
    return seeded


def test_find_base_walks_first_parents_and_skips_commits_without_results(history: Engine) -> None:
    with session_scope(history) as s:
        assert find_base(s, repository=f.REPO, sha=f.sha("head"), device_class=f.DEVICE_CLASS, walk=50) == f.sha(0)
        assert find_base(s, repository=f.REPO, sha=f.sha("head"), device_class=f.DEVICE_CLASS, walk=2) is None
        assert find_base(s, repository=f.REPO, sha=f.sha("head"), device_class=f.DEVICE_CLASS, walk=3) == f.sha(0)
        assert find_base(s, repository=f.REPO, sha=f.sha("head"), device_class="other-cpu", walk=50) == f.sha(2)
        assert find_base(s, repository=f.REPO, sha=f.sha(0), device_class=f.DEVICE_CLASS, walk=50) is None
        with pytest.raises(CompareError, match="is not recorded"):
            find_base(s, repository=f.REPO, sha=f.sha("nowhere"), device_class=f.DEVICE_CLASS, walk=50)


def test_compare_gives_each_status(history: Engine) -> None:
    with session_scope(history) as s:
        result = compare(s, repository=f.REPO, head_sha=f.sha("head"), device_class=f.DEVICE_CLASS, settings=SETTINGS)
    assert result.base_sha == f.sha(0)
    rows = {str(r.case_id): r for r in result.rows}
    assert {c: r.status for c, r in rows.items()} == {
        f.GEMM: "regressed", f.CONV: "similar", ATTN: "improved", GATHER: "no baseline",
        SCATTER: "insufficient data", BROKEN: "errored",
    }
    gemm = rows[f.GEMM]
    assert gemm.change == pytest.approx(0.2) and gemm.pvalue is not None and gemm.pvalue < 0.001
    assert gemm.base_median == pytest.approx(1e-3) and gemm.head_median == pytest.approx(1.2e-3)
    assert gemm.model == "resnet" and gemm.target == f.TARGET
    assert rows[ATTN].change == pytest.approx(-0.5)
    assert rows[GATHER].base_median is None and rows[GATHER].head_median == pytest.approx(1e-3)
    assert rows[BROKEN].head_median is None
    assert result.counts == {"regressed": 1, "improved": 1, "similar": 1, "unchanged": 0, "insufficient data": 1,
                             "inconclusive": 0,
                             "errored": 1, "no baseline": 1}


def test_compare_with_an_explicit_base_and_without_any(history: Engine) -> None:
    with session_scope(history) as s:
        with_side = compare(s, repository=f.REPO, head_sha=f.sha("head"), device_class=f.DEVICE_CLASS,
                            settings=SETTINGS, base_sha=f.sha("side"))
        assert with_side.base_sha == f.sha("side")
        statuses = {str(r.case_id): r.status for r in with_side.rows}
        assert statuses[f.GEMM] == "improved" and statuses[f.CONV] == "no baseline"

        first = compare(s, repository=f.REPO, head_sha=f.sha(0), device_class=f.DEVICE_CLASS, settings=SETTINGS)
        assert first.base_sha is None
        assert {r.status for r in first.rows} == {"no baseline"} and first.counts["no baseline"] == 5


def test_the_newest_measurement_of_a_commit_is_used(history: Engine) -> None:
    with session_scope(history) as s:
        f.run_and_upload(s, "head", [f.ok(f.GEMM, f.series_samples(1e-3))])  # a rerun, back to normal
        result = compare(s, repository=f.REPO, head_sha=f.sha("head"), device_class=f.DEVICE_CLASS, settings=SETTINGS)
    gemm = next(r for r in result.rows if str(r.case_id) == f.GEMM)
    assert gemm.status == "similar" and gemm.head_median == pytest.approx(1e-3)


# --- PR verdicts: merge base, pairing, vendor controls, overall verdict ----------------------------

VENDOR = "gemm/square-256/256x256x256/f32/vendor"


@pytest.fixture
def branches(seeded: Engine) -> Engine:
    """main: c0 <- c1 <- c2 <- c3 <- m4 (branch main); feature: f1 (on c2) <- f2, not on main.
    Results on cpu-x86-64 at c0 and at f1 (the branch's own earlier commit), none at c1, c2."""
    with session_scope(seeded) as s:
        ingest.record_commits(s, repository=f.REPO, commits=[
            f.commit(3, 2, minutes=3, branch="main"), f.commit("m4", 3, minutes=4, branch="main"),
            f.commit("f1", 2, minutes=5, branch="feature"), f.commit("f2", "f1", minutes=6, branch="feature")])
        ingest.ingest_manifest(s, manifest=f.manifest(f.sha(0), [f.built_entry(VENDOR)], suite_digest="f" * 40),
                               path="/bundles/0v")
        f.run_and_upload(s, 0, [f.ok(f.GEMM, f.series_samples(1e-3)), f.ok(f.CONV, f.series_samples(1e-3)),
                                f.ok(VENDOR, f.series_samples(1e-3))])
        f.run_and_upload(s, "f1", [f.ok(f.GEMM, f.series_samples(3e-3))])
    return seeded


def test_the_base_is_the_newest_ancestor_of_the_merge_base_with_results(branches: Engine) -> None:
    with session_scope(branches) as s:
        # c2 is the first main commit on f2's first parents: the merge base; c0 the newest with results
        choice = choose_base(s, repository=f.REPO, sha=f.sha("f2"), device_class=f.DEVICE_CLASS, walk=50)
        assert (choice.sha, choice.merge_base, choice.source) == (f.sha(0), f.sha(2), "merge base")
        # a merge base given by the caller (a webhook's base sha) is searched from itself
        given = choose_base(s, repository=f.REPO, sha=f.sha("f2"), device_class=f.DEVICE_CLASS, walk=50,
                            merge_base=f.sha(1))
        assert (given.sha, given.merge_base) == (f.sha(0), f.sha(1))
        assert find_base(s, repository=f.REPO, sha=f.sha("f2"), device_class=f.DEVICE_CLASS, walk=2) is None
        # a main commit (a push) is compared with its first-parent ancestors
        push = choose_base(s, repository=f.REPO, sha=f.sha("m4"), device_class=f.DEVICE_CLASS, walk=50)
        assert (push.sha, push.merge_base, push.source) == (f.sha(0), None, "first parent")
        result = compare(s, repository=f.REPO, head_sha=f.sha("f2"), device_class=f.DEVICE_CLASS, settings=SETTINGS)
        assert result.base_sha == f.sha(0) and result.merge_base == f.sha(2)


def _drift_head(s, gemm: float, vendor: float, conv: float = 1e-3) -> None:  # type: ignore[no-untyped-def]
    f.run_and_upload(s, "f2", [f.ok(f.GEMM, f.series_samples(gemm)), f.ok(VENDOR, f.series_samples(vendor)),
                               f.ok(f.CONV, f.series_samples(conv))])


def test_a_case_whose_vendor_control_moved_as_much_is_marked_device_drift(branches: Engine) -> None:
    with session_scope(branches) as s:
        _drift_head(s, gemm=1.2e-3, vendor=1.15e-3, conv=1.2e-3)
        result = compare(s, repository=f.REPO, head_sha=f.sha("f2"), device_class=f.DEVICE_CLASS, settings=SETTINGS)
    rows = {str(r.case_id): r for r in result.rows}
    gemm, vendor, conv = rows[f.GEMM], rows[VENDOR], rows[f.CONV]
    assert gemm.status == "regressed" and gemm.drift and str(gemm.control_case) == VENDOR
    assert gemm.control_change == pytest.approx(0.15)
    assert vendor.is_control and vendor.status == "regressed" and not vendor.drift
    assert conv.status == "regressed" and not conv.drift and conv.control_case is None
    assert result.drift == 1 and result.verdict == "regressed"  # CONV regressed; the GEMM row is drift


def test_drift_alone_is_not_a_regression_and_a_small_control_move_is_not_drift(branches: Engine) -> None:
    with session_scope(branches) as s:
        _drift_head(s, gemm=1.2e-3, vendor=1.15e-3)
        only_drift = compare(s, repository=f.REPO, head_sha=f.sha("f2"), device_class=f.DEVICE_CLASS,
                             settings=SETTINGS)
        f.run_and_upload(s, "f2", [f.ok(f.GEMM, f.series_samples(1.2e-3)), f.ok(VENDOR, f.series_samples(1.05e-3))])
        real = compare(s, repository=f.REPO, head_sha=f.sha("f2"), device_class=f.DEVICE_CLASS, settings=SETTINGS)
    assert only_drift.verdict == "similar" and only_drift.drift == 1
    gemm = next(r for r in real.rows if str(r.case_id) == f.GEMM)
    assert gemm.status == "regressed" and not gemm.drift and gemm.control_change == pytest.approx(0.05)
    assert real.verdict == "regressed"


def test_paired_results_are_judged_by_the_paired_test(branches: Engine) -> None:
    import math

    drift = [1 + 0.1 * math.sin(i) for i in range(12)]
    base = [1e-3 * d for d in drift]
    head = [b * (1.03 + 0.002 * ((i % 3) - 1)) for i, b in enumerate(base)]
    settings = SETTINGS.model_copy(update={"min_change": 0.02})
    with session_scope(branches) as s:
        f.run_and_upload(s, "f2", [f.paired_ok(f.GEMM, f.sha(2), base, head), f.ok(f.CONV, head)])
        result = compare(s, repository=f.REPO, head_sha=f.sha("f2"), device_class=f.DEVICE_CLASS, settings=settings)
        # the same samples, unpaired against c2's own results, are within the drift
        f.run_and_upload(s, 2, [f.ok(f.GEMM, base), f.ok(f.CONV, base)])
        unpaired = compare(s, repository=f.REPO, head_sha=f.sha("f2"), device_class=f.DEVICE_CLASS,
                           settings=settings, base_sha=f.sha(2))
    assert (result.base_sha, result.base_source, result.paired) == (f.sha(2), "paired", True)
    rows = {str(r.case_id): r for r in result.rows}
    assert rows[f.GEMM].paired and rows[f.GEMM].status == "regressed"
    assert rows[f.GEMM].change == pytest.approx(0.03, abs=0.002)
    # c2 had no results of its own yet: CONV is compared with the nearest ancestor that ran it, c0
    assert rows[f.CONV].status != "no baseline" and not rows[f.CONV].paired
    assert result.case_bases == {f.CONV: f.sha(0)} and unpaired.case_bases == {}
    by_case = {str(r.case_id): r for r in unpaired.rows}
    assert by_case[f.GEMM].paired and by_case[f.GEMM].status == "regressed"  # explicit base = the paired one
    # unpaired, the drift hides the change: neither a change nor the same
    assert by_case[f.CONV].status == "inconclusive" and not by_case[f.CONV].paired


def test_a_paired_base_must_be_recorded(branches: Engine) -> None:
    with session_scope(branches) as s, pytest.raises(ingest.IngestError, match="paired_base.commit"):
        f.run_and_upload(s, "f2", [f.paired_ok(f.GEMM, "a" * 40, [1e-3] * 3, [1e-3] * 3)])


def test_compare_all_gives_one_verdict_over_device_classes(branches: Engine) -> None:
    with session_scope(branches) as s:
        f.run_and_upload(s, "f2", [f.ok(f.GEMM, f.series_samples(0.8e-3)), f.failed(f.CONV, "error")])
        f.run_and_upload(s, 0, [f.ok(f.GEMM, f.series_samples(1e-3))], device_class="other-cpu")
        f.run_and_upload(s, "f2", [f.ok(f.GEMM, f.series_samples(1.5e-3))], device_class="other-cpu")
        verdict = compare_all(s, repository=f.REPO, head_sha=f.sha("f2"), settings=SETTINGS)
    assert [c.device_class for c in verdict.comparisons] == [f.DEVICE_CLASS, "other-cpu"]
    assert [c.verdict for c in verdict.comparisons] == ["improved", "regressed"]
    assert verdict.verdict == "regressed" and verdict.errored == 1
    assert overall_verdict([]) == "no baseline"


def test_identical_binaries_are_unchanged_paired_unpaired_and_not_timed(branches: Engine) -> None:
    import statistics

    base = [1e-3 * (1 + 0.01 * (i % 4)) for i in range(15)]
    slower = [b * 1.2 for b in base]
    with session_scope(branches) as s:
        ingest.ingest_manifest(s, manifest=f.manifest(f.sha(2), [f.built_entry(ATTN_F2)], suite_digest="a" * 40),
                               path="/bundles/2a")
        f.run_and_upload(s, 2, [f.ok(f.CONV, base, binary="conv"), f.ok(VENDOR, base, binary="vendor"),
                                f.ok(ATTN_F2, base, binary="attn-old")])
        f.run_and_upload(s, "f2", [
            # a fixed +20 % between two slots timing one binary: slot bias, not a change
            f.paired_ok(f.GEMM, f.sha(2), base, slower, rounds=[3] * 5, binary="gemm", base_binary="gemm"),
            f.ok(f.CONV, slower, rounds=[3] * 5, binary="conv"),                          # unpaired, same binary
            f.failed(VENDOR, "skipped", reason="not timed: same binary as the base", binary="vendor"),
            f.failed(ATTN_F2, "skipped", reason="not timed: same binary as the base", binary="attn-new"),
        ])
        on = compare(s, repository=f.REPO, head_sha=f.sha("f2"), device_class=f.DEVICE_CLASS, settings=SETTINGS)
        off = compare(s, repository=f.REPO, head_sha=f.sha("f2"), device_class=f.DEVICE_CLASS,
                      settings=SETTINGS.model_copy(update={"same_binary_shortcut": False}))
    rows = {str(r.case_id): r for r in on.rows}
    assert on.base_sha == f.sha(2)
    assert {c: r.status for c, r in rows.items()} == {f.GEMM: "unchanged", f.CONV: "unchanged", VENDOR: "unchanged"}
    gemm, conv, vendor = rows[f.GEMM], rows[f.CONV], rows[VENDOR]
    # timed: the change and its interval are still shown (a free A/A calibration)
    assert gemm.paired and gemm.same_binary and gemm.change == pytest.approx(0.2)
    assert gemm.ci_low is not None and gemm.ci_high is not None and gemm.ci_low <= gemm.change <= gemm.ci_high
    assert conv.same_binary and not conv.paired and conv.change == pytest.approx(0.2)
    # not timed: the base's median, nothing else
    assert (vendor.base_median, vendor.head_median, vendor.change) == (pytest.approx(statistics.median(base)), None, None)
    assert on.verdict == "similar" and on.counts["unchanged"] == 3 and on.counts["regressed"] == 0
    # the shortcut off (A/A measurements): judged by the timings; a case not timed has nothing to show
    statuses = {str(r.case_id): r.status for r in off.rows}
    assert statuses == {f.GEMM: "regressed", f.CONV: "regressed"}
    assert all(r.same_binary for r in off.rows) and off.verdict == "regressed"


ATTN_F2 = "attn/sdpa/8x1024x64/bf16/iree"


def test_identical_binaries_carry_a_shift_their_two_runs_share(branches: Engine) -> None:
    """Two unpaired runs of 12 cases, binaries unchanged, the shortcut off (an A/A): a head run 20 %
    slower as a whole (a loaded host; +-8 % case to case) is not 12 regressions; the identical rows
    carry the shift (`stats.run_shift_variance`). Where the runs agree, a changed binary's +25 % is found."""
    cases = [f"gemm/shape-{i}/{64 * (i + 1)}x64x64/f32/iree" for i in range(12)]
    base = [[1e-3 * (1 + 0.1 * i) * (1 + 0.003 * (k % 5)) for k in range(15)] for i in range(12)]
    spread = [1 + 0.08 * math.sin(3 * i) for i in range(12)]
    off = SETTINGS.model_copy(update={"same_binary_shortcut": False})
    with session_scope(branches) as s:
        ingest.ingest_manifest(s, manifest=f.manifest(f.sha(2), [f.built_entry(c) for c in cases]), path="/bundles/2s")
        for label in (2, 3):
            f.run_and_upload(s, label, [f.ok(c, b, rounds=[3] * 5, binary=c) for c, b in zip(cases, base, strict=True)])
        f.run_and_upload(s, "f2", [f.ok(c, [x * 1.2 * k for x in b], rounds=[3] * 5, binary=c)
                                   for c, b, k in zip(cases, base, spread, strict=True)])
        shifted = compare(s, repository=f.REPO, head_sha=f.sha("f2"), device_class=f.DEVICE_CLASS, settings=off)
        f.run_and_upload(s, "m4", [f.ok(c, [x * (1.25 if i == 0 else 1 + 0.001 * i) for x in b], rounds=[3] * 5,
                                        binary="new" if i == 0 else c) for i, (c, b) in enumerate(zip(cases, base, strict=True))])
        quiet = compare(s, repository=f.REPO, head_sha=f.sha("m4"), device_class=f.DEVICE_CLASS, settings=off)
    assert shifted.base_sha == f.sha(2) and len(shifted.rows) == 12
    assert all(r.same_binary and r.change is not None and r.change > 0.09 for r in shifted.rows)
    # not 12 regressions; nor 12 sames: a run shifted as a whole cannot show that nothing changed
    assert {r.status for r in shifted.rows} == {"inconclusive"} and shifted.verdict == "inconclusive"
    assert quiet.base_sha == f.sha(3)
    statuses = {str(r.case_id): r.status for r in quiet.rows}
    assert statuses.pop(cases[0]) == "regressed" and set(statuses.values()) == {"similar"}


def test_medians_and_interval_come_from_the_samples_of_the_change(branches: Engine) -> None:
    import statistics

    base = [1e-3 * (1 + 0.02 * math.sin(i)) for i in range(20)]
    head = [b * (1.05 + 0.004 * ((i % 5) - 2)) for i, b in enumerate(base)]
    with session_scope(branches) as s:
        f.run_and_upload(s, 2, [f.ok(f.GEMM, [2e-3] * 20)])  # the base's own, other run: not what the pair measured
        f.run_and_upload(s, "f2", [f.paired_ok(f.GEMM, f.sha(2), base, head, rounds=[4] * 5)])
        row = compare(s, repository=f.REPO, head_sha=f.sha("f2"), device_class=f.DEVICE_CLASS,
                      settings=SETTINGS).rows[0]
    assert row.base_median == pytest.approx(statistics.median(base))
    assert row.head_median == pytest.approx(statistics.median(head))
    assert row.status == "regressed" and row.change == pytest.approx(0.05, abs=0.003)
    assert row.ci_low is not None and row.ci_high is not None and row.ci_low < row.change < row.ci_high
    assert row.threshold == SETTINGS.paired_min_change


def test_a_case_not_timed_because_its_code_is_the_bases_is_unchanged_same_code(branches: Engine) -> None:
    """Issue 32: another binary with the base's code (a kernel renamed), not timed by the agent."""
    from pipeline.pr_comments.table import row_status

    base = [1e-3 * (1 + 0.01 * (i % 4)) for i in range(15)]
    with session_scope(branches) as s:
        f.run_and_upload(s, 2, [f.ok(f.CONV, base, binary="conv"), f.ok(VENDOR, base, binary="vendor")])
        f.run_and_upload(s, "f2", [
            f.failed(f.CONV, "skipped", reason="not timed: same code as base 222222222222", binary="conv-renamed"),
            f.failed(VENDOR, "skipped", reason="not timed: out of time", binary="vendor-other"),
        ])
        on = compare(s, repository=f.REPO, head_sha=f.sha("f2"), device_class=f.DEVICE_CLASS, settings=SETTINGS)
        off = compare(s, repository=f.REPO, head_sha=f.sha("f2"), device_class=f.DEVICE_CLASS,
                      settings=SETTINGS.model_copy(update={"same_binary_shortcut": False}))
    assert [(str(r.case_id), r.status, r.same_code, r.same_binary) for r in on.rows] == [
        (f.CONV, "unchanged", True, False)]
    assert row_status(on.rows[0]) == "unchanged (same code)" and on.verdict == "similar"
    assert off.rows == []
