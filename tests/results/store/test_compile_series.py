"""Compile statistics as series keyed with the target (issue 14, item 6): real IREE builds of two
commits for a runnable target (llvm-cpu:x86_64) and a build-only one (hip:gfx1250, which no agent
here can run), and real Triton builds for cuda:sm_90 and hip:gfx1250 whose second commit changes
registers; stored on both stores; their history and change points, the compare of the two commits
(API, page, `benchfarm compare` in a real process), the PR report beside a latency verdict."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import requests
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from pipeline.build.bundle import build_bundle
from pipeline.config import AnalysisSettings
from pipeline.build.suite_loader import commit_history, locate_suite, resolve_commit
from pipeline.config import Settings
from pipeline.contracts.ids import DeviceClass
from pipeline.contracts.manifest import BundleManifest
from pipeline.results.store import compile_stats, ingest
from pipeline.service.app import create_app
from pipeline.results.store.db import session_scope
from tests.helpers.cli_zygote import benchfarm_argv
from tests.helpers.live_server import live_server
from tests.helpers.suite_repo import GemmCase, case_id, commit_all, gemm_suite_files, make_suite_repo, write_files
from tests.helpers.triton_suite import TritonCase, triton_case_id, triton_suite_files

from tests.helpers import factories as f

TARGETS = ["llvm-cpu:x86_64", "hip:gfx1250"]
ALPHA = GemmCase("alpha", 16, 32, 64)


def _suite(variant: str) -> dict[str, str]:
    files = gemm_suite_files([GemmCase(ALPHA.name, ALPHA.m, ALPHA.n, ALPHA.k, variant,  # type: ignore[arg-type]
                                       targets=("llvm-cpu:*", "hip:*"))])
    init = "kernels/__init__.py"
    # the variant's tile is a CPU lowering config: on hip it would not compile, so there it stays "ok"
    source = "IreeSource(mlir=mlir(m, n, k, variant, tile)"
    # a helper change that moves this text must fail here, not as a hip build failure later
    assert files[init].count(source) == 1, "the suite helper's make_source changed; update this test"
    files[init] = files[init].replace(
        source, "IreeSource(mlir=mlir(m, n, k, variant if str(target).startswith(\"llvm-cpu\") else \"ok\", tile)")
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
        assert [(str(s.case_id), s.target, s.commits) for s in series] == [(case, "hip:gfx1250", 2),
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
        assert history_page.count('class="step-chart compile-chart"') >= 2 and second.commit[:10] in history_page


def test_benchfarm_compare_lists_compile_changes_apart_from_the_verdict(
        built: tuple[Path, list[tuple[Path, BundleManifest]]], tmp_path: Path) -> None:
    """`benchfarm compare BASE HEAD --format json` of two built-only commits: no latency rows
    (nothing ran), the compile change listed, the verdict untouched by it."""
    from pipeline.results.store.db import open_store

    repo, bundles = built
    (_, first), (_, second) = bundles
    home = tmp_path / "home"
    engine = open_store(f"sqlite:///{home / 'benchfarm.db'}")
    _store(engine, repo, bundles)
    with session_scope(engine) as session:   # a device class with no results: compare needs one named
        ingest.upsert_device_class(session, DeviceClass(name="cpu-x86_64", kind="cpu", targets=["llvm-cpu:x86_64"], runtime="iree", hal_driver="local-sync"))
    engine.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env.update(BENCHFARM_HOME=str(home))
    proc = subprocess.run([*benchfarm_argv(), "compare", first.commit, second.commit,
                           "--repository", first.repository, "--device-classes", "cpu-x86_64", "--format", "json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert [(c["target"], c["metric"]) for c in document["compile"]["changes"]] == [("llvm-cpu:x86_64", "binary_size")]
    assert document["verdict"] != "regressed"
    markdown = subprocess.run([*benchfarm_argv(), "compare", first.commit, second.commit,
                               "--repository", first.repository, "--device-classes", "cpu-x86_64",
                               "--format", "markdown"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert markdown.returncode == 0, markdown.stderr
    assert "**Compile:** 1 case changed binary size (not part of the verdict)" in markdown.stdout, markdown.stdout
    assert r"| gemm/alpha/16x32x64/f32/iree | llvm\-cpu\:x86\_64 | binary\_size |" in markdown.stdout, markdown.stdout
    # no device class at all (nothing ran either commit): the compile comparison alone, no error
    table = subprocess.run([*benchfarm_argv(), "compare", first.commit, second.commit,
                            "--repository", first.repository], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "compile statistics: 1 case changed binary size" in " ".join(table.stdout.split()), table.stdout


# --- Triton: registers, keyed by target ----------------------------------------------------------
# The same Triton GEMM for cuda:sm_90 (what an H100/H200 agent runs) and hip:gfx1250 (build-only:
# no agent has one); the second commit halves the tile (64 -> 32), which changes what the compilers
# report: registers, binary size and shared bytes, on both targets, each to its own figures.

TRITON_TARGETS = ["cuda:sm_90", "hip:gfx1250"]
TILE = TritonCase("tile", 256, 256, 256)
GPU_CLASS = DeviceClass(name="nvidia-h100-sxm", kind="gpu", targets=["cuda:sm_90"], runtime="cuda")


def _triton_suite(block: int) -> dict[str, str]:
    return triton_suite_files([TILE], block=block, targets=TRITON_TARGETS)


@pytest.fixture(scope="module")
def triton_built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[Path, BundleManifest]]]:
    pytest.importorskip("triton", reason="the builder's Triton is not installed")
    tmp = tmp_path_factory.mktemp("compile-series-triton")
    repo = make_suite_repo(tmp, _triton_suite(64), name="triton-repo")
    location = locate_suite(repo / "kernels")
    bundles = [build_bundle(location=location, sha=resolve_commit(location), targets=TRITON_TARGETS,
                            out_dir=tmp / "b", cache_dir=tmp / "cache", workers=2)]
    write_files(repo, _triton_suite(32))
    sha = commit_all(repo, "tile: 32x32 blocks")
    bundles.append(build_bundle(location=location, sha=sha, targets=TRITON_TARGETS, out_dir=tmp / "b",
                                cache_dir=tmp / "cache", workers=2))
    for _, manifest in bundles:
        assert {(e.target, e.status) for e in manifest.entries} == {(t, "built") for t in TRITON_TARGETS}, \
            [e.error for e in manifest.entries]
    return repo, bundles


def _figures(manifest: BundleManifest, target: str) -> dict[str, float | None]:
    (entry,) = [e for e in manifest.entries if e.target == target]
    assert entry.compile is not None
    return {metric: getattr(entry.compile, column) for metric, column in compile_stats.METRIC_COLUMNS.items()}


def test_a_kernel_change_shows_as_register_and_size_changes_per_target_in_the_compare(
        engine: Engine, triton_built: tuple[Path, list[tuple[Path, BundleManifest]]], tmp_path: Path) -> None:
    repo, bundles = triton_built
    (_, first), (_, second) = bundles
    _store(engine, repo, bundles)
    case = triton_case_id(TILE)
    before = {t: _figures(first, t) for t in TRITON_TARGETS}
    after = {t: _figures(second, t) for t in TRITON_TARGETS}
    # what the test rests on: the smaller tile needs fewer registers and a smaller binary everywhere
    for target in TRITON_TARGETS:
        assert after[target]["registers"] != before[target]["registers"], (target, before, after)
        assert after[target]["binary_size"] != before[target]["binary_size"], (target, before, after)

    with session_scope(engine) as session:
        series = compile_stats.list_compile_series(session, first.repository)
        assert [(str(s.case_id), s.target, s.commits) for s in series] == [(case, t, 2) for t in TRITON_TARGETS]
        for target in TRITON_TARGETS:   # one series per target, each holding its own compiler's figures
            history = compile_stats.compile_history(session, first.repository, case, target)
            assert [(p.sha, p.values) for p in history] == [(first.commit, before[target]),
                                                           (second.commit, after[target])]
            steps = compile_stats.compile_steps(history)
            assert {s.metric for s in steps} >= {"registers", "binary_size"}
            assert all(s.after_sha == history[1].sha for s in steps)
            assert all((s.before, s.after) == (before[target][s.metric], after[target][s.metric]) for s in steps)
        # no base given and no latency results: the newest first-parent ancestor with a bundle
        compiled = compile_stats.compare_compile(session, first.repository, head_sha=second.commit)
    assert (compiled.base_sha, compiled.base_source, compiled.compared) == (first.commit, "first-parent ancestor", 2)
    registers = {c.target: (c.base, c.head) for c in compiled.changes if c.metric == "registers"}
    assert registers == {t: (before[t]["registers"], after[t]["registers"]) for t in TRITON_TARGETS}
    assert "compile_time" not in {c.metric for c in compiled.changes}
    assert compiled.summary.startswith("1 case changed ") and "registers" in compiled.summary
    assert compiled.summary.endswith("(on 2 targets)")

    with live_server(create_app(Settings(home=tmp_path), engine)) as url:
        verdict = requests.get(f"{url}/api/v1/compare", params={"repository": first.repository,
                                                                "head": second.commit}, timeout=30)
        assert verdict.status_code == 200, verdict.text
        body = verdict.json()
        assert body["comparisons"] == [] and body["compile"]["base_sha"] == first.commit
        assert {(c["target"], c["metric"], c["base"], c["head"]) for c in body["compile"]["changes"]
                if c["metric"] == "registers"} == {(t, "registers", *registers[t]) for t in TRITON_TARGETS}
        for c in body["compile"]["changes"]:
            assert c["change"] == pytest.approx(c["head"] / c["base"] - 1)
        steps = requests.get(f"{url}/api/v1/compile-series/steps", timeout=10, params={
            "repository": first.repository, "case": case, "target": "hip:gfx1250"}).json()
        assert ("registers", first.commit, second.commit) in {(s["metric"], s["before_sha"], s["after_sha"])
                                                              for s in steps}
        page = requests.get(f"{url}/compare", params={"repository": first.repository, "head": second.commit},
                            timeout=30)
        assert page.status_code == 200
        assert 'id="compile-changes"' in page.text and compiled.summary in page.text
        for target in TRITON_TARGETS:
            old, new = (int(v) for v in registers[target])   # counts, shown whole ("71", not "71.0")
            assert f"<td>registers</td>\n<td class=\"num\" data-value=\"{old}\">{old}</td>" in page.text
            assert f'data-value="{new}">{new}</td>' in page.text
        history_page = requests.get(f"{url}/compile/history", timeout=10, params={
            "repository": first.repository, "case": case, "target": "cuda:sm_90"}).text
        charts = {c["metric"]: c for c in map(json.loads, re.findall(
            r'<figure class="step-chart compile-chart"[^>]*>.*?<script type="application/json">(.*?)</script>',
            history_page))}
        assert 'id="compile-steps"' in history_page and [i for i, _ in charts["registers"]["steps"]] == [1]


def test_compile_changes_sit_beside_a_similar_latency_verdict_and_leave_the_check_green(
        engine: Engine, triton_built: tuple[Path, list[tuple[Path, BundleManifest]]], tmp_path: Path) -> None:
    """Latency similar on the GPU class, registers changed: the PR report says both, and its check
    follows the latency verdict alone; the latency series' page links to its case's compile series
    on the class's own target (cuda:sm_90, not the build-only gfx1250)."""
    from pipeline.pr_comments.report import report_for_commit

    repo, bundles = triton_built
    (_, first), (_, second) = bundles
    _store(engine, repo, bundles)
    case = triton_case_id(TILE)
    settings = Settings(home=tmp_path)
    with session_scope(engine) as session:
        ingest.upsert_device_class(session, GPU_CLASS)
        for manifest in (first, second):
            run = ingest.create_run(session, repository=manifest.repository, commit_sha=manifest.commit,
                                    kind="push", device_classes=[GPU_CLASS.name])
            ingest.ingest_result(session, document=f.result_document(
                run_id=run.id, job_id=run.jobs[0].id, commit_sha=manifest.commit, repository=manifest.repository,
                device_class=GPU_CLASS.name, uid="GPU-0",
                results=[f.ok(case, f.series_samples(2e-5, n=40), target="cuda:sm_90", rounds=[10] * 4)]),
                analysis=AnalysisSettings())
    with session_scope(engine) as session:
        report = report_for_commit(session, settings=settings, repository=first.repository, sha=second.commit,
                                   pr=3, base_sha=first.commit)
        series_id = report_series_id(session, case)
    assert report.conclusion == "success", report.body
    assert "similar" in report.title
    assert "**Compile:** 1 case changed " in report.body and "(on 2 targets) (not part of the verdict)" in report.body
    assert r"| hip\:gfx1250 | registers |" in report.body
    assert report.body.rstrip().endswith("</sub>")   # the section sits above the footer

    with live_server(create_app(settings, engine)) as url:
        page = requests.get(f"{url}/series/{series_id}", timeout=10).text
    assert 'class="mono compile-link"' in page and "target=cuda%3Asm_90" in page and "gfx1250" not in page


def report_series_id(session: Session, case: str) -> int:
    from pipeline.results.store.models import Case, Series

    return session.scalar(sa.select(Series.id).join(Case, Series.case_id == Case.id)
                          .where(Case.case_id == case, Series.metric == "latency"))
