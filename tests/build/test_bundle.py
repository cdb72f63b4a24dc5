"""Bundle builds with the real iree-compile (small kernels: each compile takes well under a second)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pipeline.build.bundle import BuildCounts, build_bundle
from pipeline.build.iree_compiler import CompileError, UnsupportedTarget, compile_iree, target_flags
from pipeline.build.suite_api import IreeSource
from pipeline.build.suite_loader import locate_suite, resolve_commit
from pipeline.contracts import Target, parse_manifest
from tests.helpers.suite_repo import GemmCase, case_id, commit_all, gemm_suite_files, make_suite_repo, write_files

X86 = "llvm-cpu:x86_64"
GOOD, BROKEN = GemmCase("good"), GemmCase("broken", variant="broken")


def _build(repo: Path, tmp_path: Path, sha: str | None = None, **kwargs: object) -> tuple[Path, object, BuildCounts]:
    location = locate_suite(repo / "kernels")
    counts = BuildCounts()
    progress: list[tuple[str, int, int]] = []
    bundle_dir, manifest = build_bundle(
        location=location, sha=sha or resolve_commit(location), targets=[X86], out_dir=tmp_path / "bundles",
        cache_dir=tmp_path / "cache", workers=2, progress=lambda *a: progress.append(a), counts=counts, **kwargs,
    )
    assert progress and progress[-1][1] == progress[-1][2]
    return bundle_dir, manifest, counts


def test_build_validates_and_keeps_going_past_a_compile_failure(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, gemm_suite_files([GOOD, BROKEN]))
    bundle_dir, manifest, counts = _build(repo, tmp_path)

    on_disk = parse_manifest((bundle_dir / "manifest.json").read_bytes())
    assert on_disk == manifest
    assert (counts.compiled, counts.cached, counts.failed) == (1, 0, 1)
    entries = {e.case: e for e in manifest.entries}
    good, broken = entries[case_id(GOOD)], entries[case_id(BROKEN)]
    assert good.status == "built" and good.artifact is not None and good.compile is not None
    data = (bundle_dir / good.artifact.path).read_bytes()
    assert hashlib.sha256(data).hexdigest() == good.artifact.sha256 == Path(good.artifact.path).stem
    assert good.compile.binary_bytes == len(data) > 0
    assert "--iree-llvmcpu-target-cpu=x86-64-v3" in good.compile.flags
    assert good.flops == 2 * 8 * 16 * 32
    assert broken.status == "failed" and broken.artifact is None
    assert "iree-compile failed" in (broken.error or "") and "error" in (broken.error or "")
    # the bundle appeared whole, with the suite's sources and nothing else beside it
    assert [p.name for p in (tmp_path / "bundles").iterdir()] == [bundle_dir.name]
    assert (bundle_dir / "suite" / "reference.py").is_file()
    assert not list(bundle_dir.rglob("__pycache__"))
    assert manifest.commit == resolve_commit(locate_suite(repo))
    assert manifest.suite_path == "kernels" and manifest.targets == [X86]


def test_rebuilds_use_the_cache_and_reuse_complete_bundles(tmp_path: Path) -> None:
    other = GemmCase("other", m=4)
    repo = make_suite_repo(tmp_path, gemm_suite_files([GOOD, other]))
    first_dir, first, counts = _build(repo, tmp_path)
    assert (counts.compiled, counts.cached) == (2, 0)

    again_dir, again, counts = _build(repo, tmp_path)          # same commit: the bundle itself
    assert counts.reused_bundle and again_dir == first_dir and again == first

    write_files(repo, {"README.md": "docs only"})
    commit_all(repo, "docs")
    docs_dir, docs, counts = _build(repo, tmp_path)            # new commit, same kernels: all cached
    assert docs_dir != first_dir and docs.commit != first.commit
    assert (counts.compiled, counts.cached, counts.reused_bundle) == (0, 2, False)
    assert [e.artifact for e in docs.entries] == [e.artifact for e in first.entries]

    write_files(repo, gemm_suite_files([GOOD, GemmCase("other", m=4, k=64)]))
    commit_all(repo, "change one kernel")
    _, _, counts = _build(repo, tmp_path)
    assert (counts.compiled, counts.cached) == (1, 1)


def test_unsupported_targets_get_no_entry_and_unknown_compilers_fail_the_entry(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, gemm_suite_files([GOOD]))
    location = locate_suite(repo / "kernels")
    _, manifest = build_bundle(
        location=location, sha=resolve_commit(location), targets=[X86, "cuda:sm_80"],
        out_dir=tmp_path / "b", cache_dir=tmp_path / "c", workers=1,
    )
    assert [(e.target, e.status) for e in manifest.entries] == [(X86, "built")]  # the case targets llvm-cpu:* only


def test_compile_for_android_and_errors() -> None:
    source = IreeSource(mlir=gemm_mlir(), entry_point="mm")
    artifact = compile_iree(source, Target.parse("llvm-cpu:aarch64-android"))
    assert artifact.stats.binary_bytes == len(artifact.data) > 0
    assert "--iree-llvmcpu-target-triple=aarch64-none-linux-android34" in artifact.stats.flags
    assert artifact.stats.registers is None and artifact.stats.spills is None
    with pytest.raises(UnsupportedTarget):
        target_flags(Target.parse("cuda:sm_90"))   # iree-compile 3.13 rejects sm_90: IREE runs sm_80 on Hopper
    with pytest.raises(CompileError, match="expected"):
        compile_iree(IreeSource(mlir="func.func @mm( {", entry_point="mm"), Target.parse(X86))


def gemm_mlir() -> str:
    files = gemm_suite_files([GOOD])
    namespace: dict[str, object] = {}
    exec(files["kernels/__init__.py"], namespace)  # the helper suite's own MLIR generator
    return namespace["mlir"](8, 16, 32, "ok")  # type: ignore[operator]


def test_manifest_json_is_plain_data(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, gemm_suite_files([GOOD]))
    bundle_dir, _, _ = _build(repo, tmp_path)
    data = json.loads((bundle_dir / "manifest.json").read_text())
    assert data["schema_version"] == 1 and data["compilers"]["iree-compile"].startswith("3.13.0")
