"""Triton GEMM builds for cuda:sm_90 on this CPU-only machine: the real suite's cases, AOT."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.build.bundle import BuildCounts, build_bundle
from pipeline.build.suite_api import Pointer, Scalar, TritonSource
from pipeline.build.suite_loader import locate_suite, resolve_commit
from pipeline.build.triton_compiler import specialize
from pipeline.contracts import BundleManifest, parse_manifest
from tests.helpers.suite_repo import make_suite_repo

REPO = Path(__file__).resolve().parents[2]
SM90 = "cuda:sm_90"


# The GEMM family alone (the other families build in their own tests, on small cases): the suite's
# files as they are, with an __init__ that lists GEMM's cases only.
_GEMM_ONLY = (
    "from pipeline.build.suite_api import KernelCase\n"
    "from . import gemm\n\n\n"
    "def cases() -> list[KernelCase]:\n    return [*gemm.cases()]\n"
)


def _suite_files() -> dict[str, str]:
    """The working tree's kernels/ folder (the real suite), as files for a temporary repository."""
    root = REPO / "kernels"
    files = {f"kernels/{p.relative_to(root).as_posix()}": p.read_text() for p in root.rglob("*.py")
             if "__pycache__" not in p.parts}
    return {**files, "kernels/__init__.py": _GEMM_ONLY}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, BundleManifest, Path]:
    pytest.importorskip("triton", reason="the builder's Triton is not installed")
    tmp = tmp_path_factory.mktemp("triton")
    repo = make_suite_repo(tmp, _suite_files())
    location = locate_suite(repo / "kernels")
    counts = BuildCounts()
    bundle_dir, manifest = build_bundle(
        location=location, sha=resolve_commit(location), targets=[SM90, "llvm-cpu:x86_64"],
        out_dir=tmp / "bundles", cache_dir=tmp / "cache", workers=2, counts=counts,
    )
    assert counts.failed == 0, [e.error for e in manifest.entries if e.error]
    return bundle_dir, manifest, tmp


def test_specialization_follows_the_jit() -> None:
    source = TritonSource(
        module="m", function="f", args={"x": Pointer("x", "bf16"), "n": Scalar(4096), "one": Scalar(1), "odd": Scalar(7)},
        constexprs={"BLOCK": 64}, grid=(1,),
    )
    signature, constexprs, hinted, params = specialize(source)
    assert signature == {"x": "*bf16", "n": "i32", "odd": "i32"}
    assert constexprs == {"BLOCK": 64, "one": 1}
    assert hinted == ["x", "n"]
    assert [p["name"] for p in params] == ["x", "n", "odd"] and params[0] == {"name": "x", "tensor": "x"}


def test_triton_gemm_cases_build_for_sm90_on_the_cpu(built: tuple[Path, BundleManifest, Path]) -> None:
    bundle_dir, manifest, _ = built
    assert parse_manifest((bundle_dir / "manifest.json").read_bytes()) == manifest
    assert manifest.compilers["triton"] and manifest.compilers["iree-compile"]
    triton = [e for e in manifest.entries if e.case.endswith("/triton")]
    assert {e.target for e in triton} == {SM90}
    assert all(e.target == "llvm-cpu:x86_64" for e in manifest.entries if e.case.endswith("/iree"))
    names = {e.case for e in triton}
    assert "gemm/llama3-8b-mlp-up-prefill/4096x14336x4096/bf16/triton" in names
    assert "gemm/qwen3-8b-mlp-down-decode/1x4096x12288/bf16/triton" in names
    assert "gemm/square-8192/8192x8192x8192/bf16/triton" in names
    for entry in triton:
        assert entry.status == "built" and entry.artifact and entry.launch and entry.compile
        data = (bundle_dir / entry.artifact.path).read_bytes()
        assert data[:4] == b"\x7fELF" and entry.artifact.path.endswith(".cubin")
        assert hashlib.sha256(data).hexdigest() == entry.artifact.sha256
        launch, stats = entry.launch, entry.compile
        assert launch.entry_point == "matmul_kernel" and launch.null_pointers == 2
        assert [p.tensor for p in launch.parameters or [] if p.tensor] == ["a", "b", "c"]
        assert stats.compiler == "triton" and stats.binary_bytes == len(data)
        assert stats.registers is not None and 0 < stats.registers <= 255
        assert stats.spills is not None and stats.shared_bytes == launch.shared_bytes > 0
        assert entry.tensors[0].dtype == "bf16" and entry.flops > 0
    square = next(e for e in triton if e.case == "gemm/square-4096/4096x4096x4096/bf16/triton")
    assert square.launch is not None and square.compile is not None
    assert square.launch.grid == [(4096 // 128) * (4096 // 256)] and square.launch.threads == 256
    assert square.launch.shared_bytes is not None and square.launch.shared_bytes > 48 * 1024
    scalars = {p.name: p.value for p in square.launch.parameters or [] if p.tensor is None}
    assert scalars == {"M": 4096, "N": 4096, "K": 4096, "stride_am": 4096, "stride_bk": 4096, "stride_cm": 4096}
    decode = next(e for e in triton if e.case == "gemm/llama3-8b-o-proj-decode/1x4096x4096/bf16/triton")
    assert decode.launch is not None and "M" not in {p.name for p in decode.launch.parameters or []}  # M=1: a constant
    assert not list(bundle_dir.rglob("__pycache__"))


def test_rebuild_is_cached(built: tuple[Path, BundleManifest, Path], tmp_path: Path) -> None:
    bundle_dir, manifest, tmp = built
    shutil.rmtree(bundle_dir)
    repo = tmp / "repo"
    location = locate_suite(repo / "kernels")
    counts = BuildCounts()
    _, again = build_bundle(location=location, sha=resolve_commit(location), targets=[SM90, "llvm-cpu:x86_64"],
                            out_dir=tmp / "bundles", cache_dir=tmp / "cache", workers=2, counts=counts)
    assert counts.compiled == 0 and counts.cached == len(manifest.entries)
    assert [e.artifact for e in again.entries] == [e.artifact for e in manifest.entries]
    assert [e.launch for e in again.entries] == [e.launch for e in manifest.entries]


def test_loading_the_suite_imports_no_compiler() -> None:
    code = (
        "import sys; from pipeline.build.suite_loader import load_suite, load_suite_module;"
        "cases = load_suite('kernels'); load_suite_module('kernels', 'gemm.reference');"
        "assert any(str(c.case_id).endswith('/triton') for c in cases);"
        "bad = [m for m in ('triton', 'iree.compiler', 'torch') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
