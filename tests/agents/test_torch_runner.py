"""Vendor controls through PyTorch, and the small attention/conv Triton cases, run through run_bundle.

Any host: without torch the torch runner skips with its reason. On an NVIDIA sm_90 GPU with torch: a
bundle of the small attention and conv cases (Triton and vendor, built on that host) is ok and
correct, and the deliberately wrong variants (non-causal kernel and SDPA against the causal reference,
a grid one block short whose unwritten rows only the written-everywhere check sees) are wrong.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from pipeline.agents.devices import LocalDevice
from pipeline.agents.runners import torch_runner
from pipeline.config import MeasurementSettings
from pipeline.contracts import BundleEntry, BundleManifest, CaseResult, LaunchSpec, TensorSpec, TorchCall, parse_result
from pipeline.contracts.manifest import ReferenceSpec
from tests.agents.test_cuda_runner import _nvidia_device
from tests.helpers.attention_conv_suite import attention_conv_suite_files
from tests.helpers.suite_repo import make_suite_repo

FAST = MeasurementSettings(warmup_s=0.05, min_samples=10, min_time_s=0.0, max_time_s=0.3, rounds=2)


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_vendor_entries_are_skipped_without_torch() -> None:
    entry = BundleEntry(
        case="gemm/x/1x1x1/bf16/vendor", target="cuda:sm_90", status="built", flops=2, bytes=6,
        tensors=[TensorSpec(name=n, role="output" if n == "c" else "input", shape=[1, 1], dtype="bf16") for n in "abc"],
        launch=LaunchSpec(entry_point="torch.matmul", arguments=["a", "b"], results=["c"], torch=TorchCall(op="matmul")),
        reference=ReferenceSpec(module="gemm.reference", function="matmul", atol=0, rtol=0),
    )
    result = torch_runner.prepare_entry(device=None, bundle_dir=Path("."), entry=entry,  # type: ignore[arg-type]
                                        reference_fn=lambda a, b: a @ b, rng=np.random.default_rng(0))
    assert isinstance(result, CaseResult)
    assert result.status == "skipped" and result.reason == torch_runner.TORCH_MISSING


@pytest.fixture(scope="module")
def device() -> LocalDevice:
    found = _nvidia_device()
    if torch_runner.torch_missing():
        pytest.skip(torch_runner.torch_missing() or "")
    return found


@pytest.fixture(scope="module")
def bundle(device: LocalDevice, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, BundleManifest]:
    pytest.importorskip("triton", reason="building the test bundle needs Triton on this host")
    from pipeline.build.bundle import build_bundle
    from pipeline.build.suite_loader import locate_suite, resolve_commit

    tmp = tmp_path_factory.mktemp("attn-conv-gpu")
    repo = make_suite_repo(tmp, attention_conv_suite_files(wrong=True))
    location = locate_suite(repo / "kernels")
    return build_bundle(location=location, sha=resolve_commit(location), targets=["cuda:sm_90"],
                        out_dir=tmp / "bundles", cache_dir=tmp / "cache", workers=2)


@pytest.mark.gpu
def test_attention_conv_and_vendor_cases_run(bundle: tuple[Path, BundleManifest], device: LocalDevice) -> None:
    from pipeline.agents.local import run_bundle

    bundle_dir, manifest = bundle
    assert all(e.status == "built" for e in manifest.entries), [e.error for e in manifest.entries if e.error]
    document = parse_result(run_bundle(bundle_dir=bundle_dir, manifest=manifest, device=device, run_id="gpu-2",
                                       job_id="job-2", settings=FAST).model_dump_json())
    results = {r.case: r for r in document.results}
    for r in document.results:
        print(r.case, r.status, r.stats.median if r.stats else None, r.environment, (r.reason or "")[:300])

    wrong = {c for c in results if "-noncausal/" in c or "-short-grid/" in c}
    assert len(wrong) == 3
    for case in wrong:
        assert results[case].status == "wrong", (case, results[case].reason)
    assert "not written" in (results[next(c for c in wrong if "short-grid" in c)].reason or "")
    for case, result in results.items():
        if case in wrong:
            continue
        assert result.status == "ok", (case, result.reason)
        assert result.correctness is not None and result.correctness.passed and result.correctness.max_abs_error > 0
        assert result.stats is not None and all(0 < s < 0.01 for s in result.samples)
        if case.endswith("/vendor"):
            assert result.environment.get("torch")
    assert results["attention/small-prefill/B1-Sq256-Skv256-Hq4-Hkv2-D64/bf16/vendor"].environment.get("sdpa_backend")


@pytest.mark.gpu
def test_a_paired_vendor_control_replays_the_heads_graphs(bundle: tuple[Path, BundleManifest], device: LocalDevice,
                                                          tmp_path: Path) -> None:
    """Paired over a base of another commit with the same binaries: a vendor control's base slot is the
    head's own call (its graphs, its buffers), said so in the result; suite kernels pair as before."""
    from pipeline.agents.local import run_bundle
    from pipeline.build.bundle import build_bundle
    from pipeline.build.suite_loader import locate_suite, resolve_commit
    from tests.helpers.suite_repo import commit_all

    del bundle   # only for its skips (no GPU, no torch, no Triton): the pair is built here on two commits
    repo = make_suite_repo(tmp_path, attention_conv_suite_files(wrong=False))
    location = locate_suite(repo / "kernels")
    base_dir, base = build_bundle(location=location, sha=resolve_commit(location), targets=["cuda:sm_90"],
                                  out_dir=tmp_path / "base", cache_dir=tmp_path / "cache", workers=2)
    commit_all(repo, "no kernel change")
    head_dir, head = build_bundle(location=location, sha=resolve_commit(location), targets=["cuda:sm_90"],
                                  out_dir=tmp_path / "head", cache_dir=tmp_path / "cache", workers=2)
    document = run_bundle(bundle_dir=head_dir, manifest=head, device=device, run_id="gpu-3", job_id="job-3",
                          settings=FAST, base_bundle_dir=base_dir, base_manifest=base)
    vendor = [r for r in document.results if r.status == "ok" and r.case.endswith("/vendor")]
    suite = [r for r in document.results if r.status == "ok" and not r.case.endswith("/vendor")]
    assert vendor and suite
    for r in vendor:
        assert r.paired_base is not None and r.environment.get("paired_base", "").startswith("the head's own graphs"), r
        ratio = sorted(h / b for h, b in zip(r.samples, r.paired_base.samples))[len(r.samples) // 2]
        assert 0.9 < ratio < 1.1, (r.case, ratio)
    for r in suite:
        assert r.paired_base is not None and "paired_base" not in r.environment, r


@pytest.mark.gpu
def test_controls_choose_the_same_implementation_every_time(device: LocalDevice) -> None:
    """A control must not pick its implementation by timing: two jobs of one binary then time
    different kernels (an H100 unpaired A/A: decode attention's control +342 %). SDPA's backend is
    PyTorch's dispatch choice, named, and equal on every binding; conv leaves cuDNN's autotuning off."""
    import torch

    gpu = torch.device("cuda", 0)   # the fixture found an NVIDIA GPU; torch numbers it 0 here
    shapes = {"q": [1, 32, 1, 128], "k": [1, 8, 2048, 128], "v": [1, 8, 2048, 128], "o": [1, 32, 1, 128]}
    entry = BundleEntry(
        case="attention/decode/B1-Sq1-Skv2048-Hq32-Hkv8-D128/bf16/vendor", target="cuda:sm_90", status="built",
        flops=2, bytes=6,
        tensors=[TensorSpec(name=n, role="output" if n == "o" else "input", shape=s, dtype="bf16")
                 for n, s in shapes.items()],
        launch=LaunchSpec(entry_point="torch.sdpa", arguments=["q", "k", "v"], results=["o"],
                          torch=TorchCall(op="sdpa")),
        reference=ReferenceSpec(module="attention.reference", function="attention", atol=0, rtol=0),
    )
    tensors = {n: torch.randn(s, dtype=torch.bfloat16, device=gpu) for n, s in shapes.items()}
    params = {"is_causal": False, "scale": 128 ** -0.5, "enable_gqa": True}
    chosen = [torch_runner.OPS["sdpa"](tensors, entry.launch, params).environment for _ in range(5)]
    assert chosen[0]["sdpa_backend"] not in ("", "dispatch", "ERROR"), chosen[0]
    assert all(c == chosen[0] for c in chosen), chosen

    conv_shapes = {"x": [1, 16, 16, 32], "w": [32, 3, 3, 32], "y": [1, 16, 16, 32]}
    conv = BundleEntry(
        case="conv/c/1x16x16x32-32x3x3-s1/bf16/vendor", target="cuda:sm_90", status="built", flops=2, bytes=6,
        tensors=[TensorSpec(name=n, role="output" if n == "y" else "input", shape=s, dtype="bf16")
                 for n, s in conv_shapes.items()],
        launch=LaunchSpec(entry_point="torch.conv2d", arguments=["x", "w"], results=["y"],
                          torch=TorchCall(op="conv2d")),
        reference=ReferenceSpec(module="conv.reference", function="conv", atol=0, rtol=0),
    )
    torch.backends.cudnn.benchmark = True
    conv_tensors = {n: torch.randn(s, dtype=torch.bfloat16, device=gpu) for n, s in conv_shapes.items()}
    torch_runner.OPS["conv2d"](conv_tensors, conv.launch, {"stride": 1, "padding": 1}).run()
    assert torch.backends.cudnn.benchmark is False


@pytest.mark.gpu
def test_a_job_timed_in_groups_gives_torchs_cached_memory_back(bundle: tuple[Path, BundleManifest],
                                                                device: LocalDevice) -> None:
    """A budget under one copy of every case (a small GPU's) times the bundle in groups, each released
    before the next; what torch's cache kept of the vendor controls is given back after each (the next
    group's cuMemAlloc cannot take it from that cache)."""
    import torch

    from pipeline.agents.local import run_bundle

    bundle_dir, manifest = bundle
    largest = max(sum(t.nbytes for t in e.tensors) for e in manifest.entries)
    settings = FAST.model_copy(update={"device_overrides": {"gpu": {"placement_total_bytes": 2 * largest}}})
    torch.cuda.empty_cache()
    reserved = torch.cuda.memory_reserved()
    kept = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")   # released: torch's cache keeps it
    del kept
    assert torch.cuda.memory_reserved() >= reserved + (256 << 20)
    document = run_bundle(bundle_dir=bundle_dir, manifest=manifest, device=device, run_id="gpu-4", job_id="job-4",
                          settings=settings)
    groups = int(document.environment["timing_groups"])
    assert groups >= 2, document.environment
    statuses = {r.case: r.status for r in document.results}
    assert list(statuses.values()).count("wrong") == 3 and set(statuses.values()) == {"ok", "wrong"}, statuses
    labels = {r.environment.get("timing_group") for r in document.results if r.status == "ok"}
    assert len(labels) >= 2 and labels <= {f"{g}/{groups}" for g in range(1, groups + 1)}, labels
    # given back; torch may keep one small segment of its own state made during the job (H100: 2 MiB)
    assert torch.cuda.memory_reserved() <= reserved + (2 << 20), (torch.cuda.memory_reserved(), reserved)
