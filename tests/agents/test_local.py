"""run_bundle on real bundles with the real IREE runtime (local-sync on this host's CPU)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import Engine

from pipeline.agents.devices import LocalDevice
from pipeline.agents.local import run_bundle
from pipeline.build.bundle import build_bundle
from pipeline.build.suite_loader import commit_history, locate_suite, resolve_commit
from pipeline.config import MeasurementSettings
from pipeline.contracts import BundleManifest, ResultDocument, parse_result
from tests.helpers.cpu import x86_64_cpu
from tests.helpers.stores import database_url, engine, store_url  # noqa: F401  (fixtures: SQLite and PostgreSQL)
from tests.helpers.suite_repo import (
    GemmCase,
    case_id,
    gemm_suite_files,
    make_suite_repo,
)

FAST = MeasurementSettings(warmup_s=0.0, min_samples=5, min_time_s=0.0, max_time_s=0.2, rounds=2,
                           min_rounds=2)
GOOD, WRONG, BROKEN = GemmCase("good"), GemmCase("wrong", variant="wrong"), GemmCase("broken", variant="broken")


@pytest.fixture(scope="module")
def device() -> LocalDevice:
    return x86_64_cpu()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, BundleManifest]:
    tmp = tmp_path_factory.mktemp("bundle")
    repo = make_suite_repo(tmp, gemm_suite_files([GOOD, WRONG, BROKEN]))
    location = locate_suite(repo / "kernels")
    return build_bundle(
        location=location, sha=resolve_commit(location), targets=["llvm-cpu:x86_64"],
        out_dir=tmp / "bundles", cache_dir=tmp / "cache", workers=2,
    )


def _run(bundle_dir: Path, manifest: BundleManifest, device: LocalDevice, run_id: str = "run-1") -> ResultDocument:
    seen: list[tuple[str, int, int]] = []
    document = run_bundle(bundle_dir=bundle_dir, manifest=manifest, device=device, run_id=run_id, job_id="job-1",
                          settings=FAST, progress=lambda *a: seen.append(a))
    checking = [s[1:] for s in seen if s[0].startswith("checking:")]
    assert checking == [(i, len(manifest.entries)) for i in range(1, len(manifest.entries) + 1)]
    timing = [s[1:] for s in seen if s[0].startswith("timing: round")]
    timed = sum(1 for r in document.results if r.status == "ok") * FAST.rounds
    assert timing == [(i, timed) for i in range(1, timed + 1)]
    assert seen[-1] == ("timing: done", timed, timed)
    return parse_result(document.model_dump_json())   # the document survives the contract


def test_ok_wrong_and_skipped(bundle: tuple[Path, BundleManifest], device: LocalDevice) -> None:
    bundle_dir, manifest = bundle
    document = _run(bundle_dir, manifest, device)
    results = {r.case: r for r in document.results}

    good = results[case_id(GOOD)]
    assert good.status == "ok" and good.correctness is not None and good.correctness.passed
    assert good.correctness.max_abs_error < 1e-4
    assert good.stats is not None and good.stats.n == len(good.samples) >= FAST.min_samples
    assert all(0 < s < 0.1 for s in good.samples)

    wrong = results[case_id(WRONG)]
    assert wrong.status == "wrong" and not wrong.samples and wrong.stats is None
    assert wrong.correctness is not None and not wrong.correctness.passed
    assert wrong.correctness.max_abs_error == pytest.approx(1.0, abs=1e-4)

    broken = results[case_id(BROKEN)]
    assert broken.status == "skipped" and "iree-compile failed" in (broken.reason or "")

    assert document.commit == manifest.commit and document.device == device.info
    assert document.environment["iree_runtime"] == "3.13.0" and document.environment["hal_driver"] == "local-sync"
    assert not list((bundle_dir / "suite").rglob("__pycache__"))


def test_inputs_are_fresh_per_run(bundle: tuple[Path, BundleManifest], device: LocalDevice) -> None:
    bundle_dir, manifest = bundle
    first = {r.case: r for r in _run(bundle_dir, manifest, device, run_id="run-a").results}
    second = {r.case: r for r in _run(bundle_dir, manifest, device, run_id="run-b").results}
    key = case_id(GOOD)
    assert first[key].environment["input_seed"] != second[key].environment["input_seed"]
    assert first[key].correctness != second[key].correctness    # other random inputs, other rounding


def test_corrupted_artifact_is_an_error(bundle: tuple[Path, BundleManifest], device: LocalDevice, tmp_path: Path) -> None:
    bundle_dir, manifest = bundle
    copy = tmp_path / "corrupt"
    shutil.copytree(bundle_dir, copy)
    entry = next(e for e in manifest.entries if e.case == case_id(GOOD))
    assert entry.artifact is not None
    path = copy / entry.artifact.path
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))

    results = {r.case: r for r in _run(copy, manifest, device).results}
    assert results[case_id(GOOD)].status == "error"
    assert "sha256" in (results[case_id(GOOD)].reason or "")
    assert results[case_id(WRONG)].status == "wrong"    # the other cases go on


def test_entries_for_other_targets_are_not_run(bundle: tuple[Path, BundleManifest], device: LocalDevice) -> None:
    bundle_dir, manifest = bundle
    other = manifest.model_copy(update={"entries": [e.model_copy(update={"target": "llvm-cpu:aarch64-android"})
                                                    for e in manifest.entries]})
    document = run_bundle(bundle_dir=bundle_dir, manifest=other, device=device, run_id="r", job_id="j", settings=FAST)
    assert document.results == []


def test_result_names_the_bundle_as_the_store_does(bundle: tuple[Path, BundleManifest], device: LocalDevice,
                                                   engine: Engine) -> None:  # noqa: F811
    """One bundle digest: the store's (ingest_manifest), the builder's and the result document's agree."""
    from pipeline.contracts import bundle_digest
    from pipeline.results.store import ingest
    from pipeline.results.store.db import session_scope

    bundle_dir, manifest = bundle
    location = locate_suite(bundle_dir.parent.parent / "repo" / "kernels")   # the fixture's checkout
    with session_scope(engine) as session:
        ingest.upsert_repository(session, name=manifest.repository)
        ingest.record_commits(session, repository=manifest.repository, commits=commit_history(location, manifest.commit))
        stored = ingest.ingest_manifest(session, manifest=manifest, path=str(bundle_dir))
    assert bundle_digest(manifest) == stored
    assert _run(bundle_dir, manifest, device).bundle_digest == stored
