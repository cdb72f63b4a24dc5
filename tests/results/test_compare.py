"""Finding the base along first parents, and the per-case verdicts of a comparison."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from pipeline.config import CompareSettings
from pipeline.results import ingest
from pipeline.results.compare import CompareError, compare, find_base
from pipeline.results.db import session_scope

from . import factories as f

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
    rows = {r.case_id: r for r in result.rows}
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
    assert result.counts == {"regressed": 1, "improved": 1, "similar": 1, "insufficient data": 1, "errored": 1,
                             "no baseline": 1}


def test_compare_with_an_explicit_base_and_without_any(history: Engine) -> None:
    with session_scope(history) as s:
        with_side = compare(s, repository=f.REPO, head_sha=f.sha("head"), device_class=f.DEVICE_CLASS,
                            settings=SETTINGS, base_sha=f.sha("side"))
        assert with_side.base_sha == f.sha("side")
        statuses = {r.case_id: r.status for r in with_side.rows}
        assert statuses[f.GEMM] == "improved" and statuses[f.CONV] == "no baseline"

        first = compare(s, repository=f.REPO, head_sha=f.sha(0), device_class=f.DEVICE_CLASS, settings=SETTINGS)
        assert first.base_sha is None
        assert {r.status for r in first.rows} == {"no baseline"} and first.counts["no baseline"] == 5


def test_the_newest_measurement_of_a_commit_is_used(history: Engine) -> None:
    with session_scope(history) as s:
        f.run_and_upload(s, "head", [f.ok(f.GEMM, f.series_samples(1e-3))])  # a rerun, back to normal
        result = compare(s, repository=f.REPO, head_sha=f.sha("head"), device_class=f.DEVICE_CLASS, settings=SETTINGS)
    gemm = next(r for r in result.rows if r.case_id == f.GEMM)
    assert gemm.status == "similar" and gemm.head_median == pytest.approx(1e-3)
