"""Attention and conv build on this CPU-only machine: small cases for cuda:sm_90 and hip:gfx942
(compile-only), and their vendor controls recorded without an artifact."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pipeline.build.bundle import build_bundle
from pipeline.build.suite_loader import load_suite, locate_suite, resolve_commit
from pipeline.contracts import BundleManifest, parse_manifest
from tests.helpers.attention_conv_suite import attention_conv_suite_files
from tests.helpers.suite_repo import make_suite_repo

REPO = Path(__file__).resolve().parents[2]
SM90, GFX942 = "cuda:sm_90", "hip:gfx942"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, BundleManifest]:
    pytest.importorskip("triton", reason="the builder's Triton is not installed")
    tmp = tmp_path_factory.mktemp("attn-conv")
    repo = make_suite_repo(tmp, attention_conv_suite_files())
    location = locate_suite(repo / "kernels")
    return build_bundle(location=location, sha=resolve_commit(location), targets=[SM90, GFX942],
                        out_dir=tmp / "bundles", cache_dir=tmp / "cache", workers=2)


def test_small_cases_build_for_sm90_and_gfx942(built: tuple[Path, BundleManifest]) -> None:
    bundle_dir, manifest = built
    assert parse_manifest((bundle_dir / "manifest.json").read_bytes()) == manifest
    triton = [e for e in manifest.entries if e.case.endswith("/triton")]
    assert all(e.status == "built" for e in triton), [e.error for e in triton if e.error]
    assert {(e.case.split("/")[1], e.target) for e in triton} == {
        (name, target) for name in ("small-prefill", "small-decode", "small-3x3", "small-dw-s2")
        for target in (SM90, GFX942)}
    for entry in triton:
        assert entry.artifact and entry.launch and entry.compile
        data = (bundle_dir / entry.artifact.path).read_bytes()
        assert data[:4] == b"\x7fELF" and hashlib.sha256(data).hexdigest() == entry.artifact.sha256
        assert entry.artifact.path.endswith(".cubin" if entry.target == SM90 else ".hsaco")
        assert entry.launch.null_pointers == 2 and entry.launch.threads in (128, 256)
        assert entry.launch.threads % (32 if entry.target == SM90 else 64) == 0
        assert entry.compile.registers is not None and 0 < entry.compile.registers <= 512
        assert entry.compile.spills == 0 and entry.compile.shared_bytes == entry.launch.shared_bytes
    by_key = {(e.case.split("/")[1], e.target): e for e in triton}
    prefill = by_key[("small-prefill", SM90)]
    assert prefill.launch is not None and prefill.launch.entry_point == "attn_fwd_kernel"
    assert prefill.launch.grid == [4, 2] and prefill.launch.shared_bytes
    assert prefill.reference is not None and prefill.reference.subset is not None
    assert prefill.flops == 4 * 4 * 256 * 256 * 64 // 2
    decode = by_key[("small-decode", GFX942)]
    assert decode.launch is not None and decode.launch.entry_point == "attn_decode_kernel"
    assert {t.name for t in decode.tensors} >= {"part_ml", "part_acc", "semaphore"}
    conv = by_key[("small-3x3", SM90)]
    assert conv.launch is not None and [p.tensor for p in conv.launch.parameters or [] if p.tensor] == ["x", "w", "y"]


def test_vendor_controls_are_recorded_for_cuda_only(built: tuple[Path, BundleManifest]) -> None:
    _, manifest = built
    vendor = [e for e in manifest.entries if e.case.endswith("/vendor")]
    assert {e.target for e in vendor} == {SM90} and len(vendor) == 4
    for entry in vendor:
        assert entry.status == "built" and entry.artifact is None and entry.compile is None
        assert entry.launch is not None and entry.launch.torch is not None and entry.launch.parameters is None
    ops = {e.case.split("/")[1]: e.launch.torch for e in vendor if e.launch}
    assert ops["small-prefill"] is not None and ops["small-prefill"].op == "sdpa"
    assert ops["small-prefill"].params == {"is_causal": True, "scale": 0.125, "enable_gqa": True}
    assert ops["small-dw-s2"] is not None and ops["small-dw-s2"].params == {"stride": 2, "padding": 1, "groups": 32}


def test_real_suite_lists_every_family_and_target() -> None:
    ids = {str(c.case_id): c for c in load_suite(REPO / "kernels")}
    for impl in ("triton", "vendor"):
        assert f"attention/llama3-8b-prefill/B1-Sq16384-Skv16384-Hq32-Hkv8-D128/bf16/{impl}" in ids
        assert f"attention/qwen3-14b-decode/B1-Sq1-Skv8192-Hq40-Hkv8-D128/bf16/{impl}" in ids
        assert f"conv/resnet50-stem/32x224x224x3-64x7x7-s2/bf16/{impl}" in ids
        assert f"conv/mobilenetv2-dw-112/1x112x112x32-32x3x3-s1/bf16/{impl}" in ids
    assert "gemm/square-8192/8192x8192x8192/bf16/vendor" in ids
    triton = ids["attention/llama3.2-1b-prefill/B1-Sq2048-Skv2048-Hq32-Hkv8-D64/bf16/triton"]
    assert set(triton.targets) == {SM90, GFX942, "hip:gfx950", "hip:gfx1250"}
