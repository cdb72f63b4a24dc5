"""The report from a real store: the check and the comment say what the store's verdict says."""

from __future__ import annotations

from sqlalchemy import Engine

from pipeline.config import load_settings
from pipeline.pr_comments.report import report_for_commit
from pipeline.results.store import ingest
from pipeline.results.store.compare import compare
from pipeline.results.store.db import session_scope
from tests.helpers import factories as f
from tests.helpers.stores import database_url, engine, seeded, store_url  # noqa: F401  (the store fixtures, both stores)

VENDOR = "gemm/square-256/256x256x256/f32/vendor"


def test_a_drift_only_comparison_does_not_fail_the_check(seeded: Engine) -> None:  # noqa: F811
    """Issue 14, item 1: the check decided from raw counts (the control and the drift-marked row as
    two regressions: "failure") while the store said "similar"."""
    settings = load_settings(public_url="http://bf.example")
    with session_scope(seeded) as s:
        ingest.ingest_manifest(s, manifest=f.manifest(f.sha(0), [f.built_entry(VENDOR)], suite_digest="f" * 40),
                               path="/bundles/0v")
        f.run_and_upload(s, 0, [f.ok(f.GEMM, f.series_samples(1e-3)), f.ok(VENDOR, f.series_samples(1e-3))])
        # the suite case +20 %, its vendor control +15 %: the device drifted, the code did not change
        f.run_and_upload(s, 1, [f.ok(f.GEMM, f.series_samples(1.2e-3)), f.ok(VENDOR, f.series_samples(1.15e-3))])
        comparison = compare(s, repository=f.REPO, head_sha=f.sha(1), device_class=f.DEVICE_CLASS,
                             settings=settings.compare)
        report = report_for_commit(s, settings=settings, repository=f.REPO, sha=f.sha(1), pr=3)
    assert comparison.verdict == "similar" and comparison.drift == 1
    assert report.conclusion == "success"
    assert "#### Regressed" not in report.body, "neither the control nor the drift-marked row is a regression"
    assert report.title.startswith("similar")
