"""Compile statistics as series keyed with the target (issue 14, item 6): real IREE builds of two
commits for a runnable target (llvm-cpu:x86_64) and a build-only one (hip:gfx1250, which no agent
here can run), stored on both stores; their history, the compare of the two commits, the API, the
pages and `benchfarm compare` over real HTTP and a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from sqlalchemy.engine import Engine

from pipeline.build.bundle import build_bundle
from pipeline.build.suite_loader import commit_history, locate_suite, resolve_commit
from pipeline.config import Settings
from pipeline.contracts.manifest import BundleManifest
from pipeline.results import compile_stats, ingest
from pipeline.results.api import create_app
from pipeline.results.db import session_scope
from tests.helpers.live_server import live_server
from tests.helpers.suite_repo import GemmCase, case_id, commit_all, gemm_suite_files, make_suite_repo, write_files

TARGETS = ["llvm-cpu:x86_64", "hip:gfx1250"]
ALPHA = GemmCase("alpha", 16, 32, 64)


def _suite(variant: str) -> dict[str, str]:
    files = gemm_suite_files([GemmCase(ALPHA.name, ALPHA.m, ALPHA.n, ALPHA.k, variant)])  # type: ignore[arg-type]
    init = "kernels/__init__.py"
    files[init] = files[init].replace('targets=("llvm-cpu:*",)', 'targets=("llvm-cpu:*", "hip:*")')
    # the variant's tile is a CPU lowering config: on hip it would not compile, so there it stays "ok"
    files[init] = files[init].replace(
        "make_source=lambda target, m=m, n=n, k=k, variant=variant: IreeSource(mlir=mlir(m, n, k, variant), "
        "entry_point=\"mm\")",
        "make_source=lambda target, m=m, n=n, k=k, variant=variant: IreeSource(mlir=mlir(m, n, k, variant if "
        "str(target).startswith(\"llvm-cpu\") else \"ok\"), entry_point=\"mm\")")
    return files


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[Path, BundleManifest]]]:
    tmp = tmp_path_factory.mktemp("compile-series")
    repo = make_suite_repo(tmp, _suite("ok"), name="suite-repo")
    location = locate_suite(repo / "kernels")
    bundles = [build_bundle(location=location, sha=resolve_commit(location), targets=TARGETS, out_dir=tmp / "b",
                            cache_dir=tmp / "cache", workers=2)]
    write_files(repo, _suite("slow"))
    sha = commit_all(repo, "alpha: a 1x8 register tile on the CPU")
    bundles.append(build_bundle(location=location, sha=sha, targets=TARGETS, out_dir=tmp / "b",
                                cache_dir=tmp / "cache", workers=2))
    return repo, bundles


def _store(engine: Engine, repo: Path, bundles: list[tuple[Path, BundleManifest]]) -> None:
    location = locate_suite(repo / "kernels")
    for path, manifest in bundles:
        with session_scope(engine) as session:
            ingest.record_commits(session, repository=manifest.repository,
                                  commits=commit_history(location, manifest.commit))
            ingest.ingest_manifest(session, manifest=manifest, path=str(path))


def test_compile_statistics_are_series_per_target_with_history_and_changes(
        engine: Engine, built: tuple[Path, list[tuple[Path, BundleManifest]]], tmp_path: Path) -> None:
    repo, bundles = built
    (_, first), (_, second) = bundles
    assert {e.target for e in second.entries if e.status == "built"} == set(TARGETS)
    _store(engine, repo, bundles)
    case = case_id(ALPHA)
    with session_scope(engine) as session:
        series = compile_stats.list_compile_series(session, first.repository)
        assert [(s.case_id, s.target, s.commits) for s in series] == [(case, "hip:gfx1250", 2),
                                                                        (case, "llvm-cpu:x86_64", 2)]
        history = compile_stats.compile_history(session, first.repository, case, "hip:gfx1250")
        assert [p.sha for p in history] == [first.commit, second.commit]
        assert all(p.values["binary_size"] and p.values["compile_time"] is not None for p in history)
        changes = compile_stats.compile_changes(session, first.repository, head_sha=second.commit,
                                                base_sha=first.commit)
    # the CPU tile changed the x86 binary; the gfx1250 one is the same source, so the same size
    assert [(c.target, c.metric) for c in changes] == [("llvm-cpu:x86_64", "binary_size")]
    (change,) = changes
    assert change.base != change.head and change.change == pytest.approx(change.head / change.base - 1)

    with live_server(create_app(Settings(home=tmp_path), engine)) as url:
        listed = requests.get(f"{url}/api/v1/compile-series", params={"repository": first.repository}, timeout=10)
        assert listed.status_code == 200 and {s["target"] for s in listed.json()} == set(TARGETS)
        points = requests.get(f"{url}/api/v1/compile-series/history", timeout=10,
                              params={"repository": first.repository, "case": case, "target": "hip:gfx1250"}).json()
        assert [p["sha"] for p in points] == [first.commit, second.commit]
        missing = requests.get(f"{url}/api/v1/compile-series/history", timeout=10,
                               params={"repository": first.repository, "case": case, "target": "hip:gfx942"})
        assert missing.status_code == 404 and "no compile statistics" in missing.json()["error"]
        compared = requests.get(f"{url}/api/v1/compile-series/compare", timeout=10, params={
            "repository": first.repository, "head": second.commit, "base": first.commit}).json()
        assert [(c["target"], c["metric"], c["head"]) for c in compared] == [
            ("llvm-cpu:x86_64", "binary_size", change.head)]
        page = requests.get(f"{url}/compile", params={"repository": first.repository}, timeout=10).text
        assert "hip:gfx1250" in page and case in page
        history_page = requests.get(f"{url}/compile/history", timeout=10, params={
            "repository": first.repository, "case": case, "target": "hip:gfx1250"}).text
        assert history_page.count('class="compile-chart"') >= 2 and second.commit[:10] in history_page


def test_benchfarm_compare_lists_compile_changes_apart_from_the_verdict(
        built: tuple[Path, list[tuple[Path, BundleManifest]]], tmp_path: Path) -> None:
    """`benchfarm compare BASE HEAD --format json` of two built-only commits: no latency rows
    (nothing ran), the compile change listed, the verdict untouched by it."""
    from pipeline.results.db import open_store

    repo, bundles = built
    (_, first), (_, second) = bundles
    home = tmp_path / "home"
    engine = open_store(f"sqlite:///{home / 'benchfarm.db'}")
    _store(engine, repo, bundles)
    with session_scope(engine) as session:   # a device class with no results: compare needs one named
        from pipeline.contracts.ids import DeviceClass
        ingest.upsert_device_class(session, DeviceClass(name="cpu-x86_64", kind="cpu", targets=["llvm-cpu:x86_64"], runtime="iree", hal_driver="local-sync"))
    engine.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env.update(BENCHFARM_HOME=str(home))
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "compare", first.commit, second.commit,
                           "--repository", first.repository, "--device-classes", "cpu-x86_64", "--format", "json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert [(c["target"], c["metric"]) for c in document["compile"]["changes"]] == [("llvm-cpu:x86_64", "binary_size")]
    assert document["verdict"] != "regressed"
    markdown = subprocess.run([sys.executable, "-m", "pipeline.cli", "compare", first.commit, second.commit,
                               "--repository", first.repository, "--device-classes", "cpu-x86_64",
                               "--format", "markdown"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert markdown.returncode == 0, markdown.stderr
    assert "**Compile:** 1 case changed binary size (not part of the verdict)" in markdown.stdout, markdown.stdout
    assert r"| gemm/alpha/16x32x64/f32/iree | llvm\-cpu\:x86\_64 | binary\_size |" in markdown.stdout, markdown.stdout
