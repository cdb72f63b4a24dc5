"""Paired runs on the CPU (IREE llvm-cpu): two commits of a small GEMM suite, the second making one
case slower (variant "slow"); run_bundle times head interleaved with the base bundle, and the store's
verdict (ingest, then compare) decides by the paired test: the slowed case regressed, the others similar."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.agents.devices import LocalDevice, cpu_device
from pipeline.agents.local import run_bundle
from pipeline.build.bundle import build_bundle
from pipeline.build.suite_loader import commit_history, locate_suite, resolve_commit
from pipeline.config import CompareSettings, MeasurementSettings
from pipeline.contracts import BundleManifest, ResultDocument, parse_result
from pipeline.results import ingest
from pipeline.results.compare import compare
from pipeline.results.db import open_store, session_scope
from tests.helpers.suite_repo import GemmCase, case_id, commit_all, gemm_suite_files, make_suite_repo, write_files

# ~1 ms a call on one core; "slow" makes beta several times slower
CASES = [GemmCase("alpha", 128, 128, 128), GemmCase("beta", 96, 128, 160), GemmCase("gamma", 160, 96, 128)]
ONLY_HEAD = GemmCase("delta", 64, 64, 64)
SETTINGS = MeasurementSettings(warmup_s=0.02, min_samples=12, min_time_s=0.05, max_time_s=0.6, max_rel_noise=0.01,
                               rounds=3, device_overrides={})


@pytest.fixture(scope="module")
def device() -> LocalDevice:
    found = cpu_device()
    if found is None or found.device_class.targets != ["llvm-cpu:x86_64"]:
        pytest.skip("needs an x86_64 host")
    return found


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[Path, BundleManifest], tuple[Path, BundleManifest]]:
    tmp = tmp_path_factory.mktemp("paired")
    repo = make_suite_repo(tmp, gemm_suite_files(CASES))
    location = locate_suite(repo / "kernels")

    def build(sha: str) -> tuple[Path, BundleManifest]:
        return build_bundle(location=location, sha=sha, targets=["llvm-cpu:x86_64"], out_dir=tmp / "bundles",
                            cache_dir=tmp / "cache", workers=2)

    base = build(resolve_commit(location))
    slowed = [GemmCase(c.name, c.m, c.n, c.k, "slow" if c.name == "beta" else "ok") for c in CASES]
    write_files(repo, gemm_suite_files([*slowed, ONLY_HEAD]))
    head = build(commit_all(repo, "beta: a 1x8 register tile"))
    return repo, base, head


def test_paired_results_carry_the_base_samples_and_the_verdict_is_paired(
    bundles: tuple[Path, tuple[Path, BundleManifest], tuple[Path, BundleManifest]], device: LocalDevice, tmp_path: Path,
) -> None:
    repo, (base_dir, base), (head_dir, head) = bundles
    seen: list[str] = []
    document = run_bundle(bundle_dir=head_dir, manifest=head, device=device, run_id="r", job_id="j", settings=SETTINGS,
                          base_bundle_dir=base_dir, base_manifest=base, progress=lambda d, *_: seen.append(d))
    document = parse_result(document.model_dump_json())   # the document survives the contract
    results = {r.case: r for r in document.results}
    assert set(results) == {case_id(c) for c in [*CASES, ONLY_HEAD]}       # head results only
    assert sum(d.startswith("checking base:") for d in seen) == len(CASES)
    for c in CASES:
        r = results[case_id(c)]
        assert r.status == "ok" and r.paired_base is not None and r.paired_base.commit == base.commit
        assert len(r.paired_base.samples) == len(r.samples) >= SETTINGS.min_samples
    assert results[case_id(ONLY_HEAD)].paired_base is None and results[case_id(ONLY_HEAD)].status == "ok"
    beta = results[case_id(CASES[1])]
    assert sorted(h / b for b, h in zip(beta.paired_base.samples, beta.samples))[len(beta.samples) // 2] > 1.5

    engine = open_store(f"sqlite:///{tmp_path}/store.db")
    _ingest(engine, repo, document, device, base, head, head_dir)
    with session_scope(engine) as session:
        comparison = compare(session, repository=head.repository, head_sha=head.commit,
                             device_class=device.device_class.name, settings=CompareSettings())
    rows = {r.case_id: r for r in comparison.rows}
    assert comparison.base_source == "paired" and comparison.base_sha == base.commit
    assert rows[case_id(CASES[1])].status == "regressed" and rows[case_id(CASES[1])].paired
    for c in (CASES[0], CASES[2]):
        assert rows[case_id(c)].status == "similar" and rows[case_id(c)].paired, rows[case_id(c)]
    assert rows[case_id(ONLY_HEAD)].status == "no baseline"


def test_a_base_of_the_same_commit_is_refused(
    bundles: tuple[Path, tuple[Path, BundleManifest], tuple[Path, BundleManifest]], device: LocalDevice,
) -> None:
    _, (base_dir, base), _ = bundles
    with pytest.raises(ValueError, match="same commit"):
        run_bundle(bundle_dir=base_dir, manifest=base, device=device, run_id="r", job_id="j", settings=SETTINGS,
                   base_bundle_dir=base_dir, base_manifest=base)


def _ingest(engine, repo: Path, document: ResultDocument, device: LocalDevice, base: BundleManifest,  # type: ignore[no-untyped-def]
            head: BundleManifest, head_dir: Path) -> None:
    location = locate_suite(repo / "kernels")
    with session_scope(engine) as session:
        repository = ingest.upsert_repository(session, name=head.repository)
        ingest.record_commits(session, repository=repository, commits=commit_history(location, head.commit))
        ingest.upsert_device_class(session, device.device_class)
        ingest.upsert_device(session, info=device.info)
        run = ingest.create_run(session, repository=repository, commit_sha=head.commit, kind="local",
                                device_classes=[device.device_class.name])
        ingest.ingest_manifest(session, manifest=head, path=str(head_dir))
        document = document.model_copy(update={"run_id": run.id, "job_id": run.jobs[0].id})
    with session_scope(engine) as session:
        ingest.ingest_result(session, document=document)
