"""The CUDA runner: bf16 helpers on any host; on an NVIDIA GPU, a Triton GEMM bundle built here (AOT)
and run through run_bundle with the CUDA driver API."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from pipeline.agents.devices import LocalDevice, nvidia_devices
from pipeline.agents.runners.cuda_runner import CudaDevice, bf16_bits, bf16_values
from pipeline.config import MeasurementSettings
from pipeline.contracts import BundleManifest, parse_result
from tests.helpers.suite_repo import make_suite_repo
from tests.helpers.triton_suite import TritonCase, triton_case_id, triton_suite_files

FAST = MeasurementSettings(warmup_s=0.05, min_samples=10, min_time_s=0.0, max_time_s=0.5)
OK, WRONG, UNWRITTEN = TritonCase("ok"), TritonCase("wrong", variant="wrong"), TritonCase("unwritten", variant="unwritten")


def test_bf16_bit_patterns_round_to_nearest_even() -> None:
    values = np.array([1.0, -2.5, 1.0 + 2**-8, 1.0 + 3 * 2**-8], dtype=np.float32)   # two ties: to even
    assert bf16_values(bf16_bits(values)).tolist() == [1.0, -2.5, 1.0, 1.0 + 4 * 2**-8]
    assert np.isnan(bf16_values(np.array([0xFFFF], dtype=np.uint16)))[0]   # the poison pattern is a NaN
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    assert np.all(np.abs(bf16_values(bf16_bits(x)) - x) <= np.abs(x) * 2**-8)   # half an ulp of 8 bits


def _nvidia_device() -> LocalDevice:
    found = nvidia_devices()
    if not found:
        pytest.skip("no NVIDIA GPU or driver on this host (nvidia-smi found none)")
    if importlib.util.find_spec("cuda.bindings") is None:
        pytest.skip("cuda-python (cuda.bindings) is not installed on this GPU host")
    if not any(t == "cuda:sm_90" for d in found for t in d.device_class.targets):
        pytest.skip(f"no sm_90 GPU here ({', '.join(d.info.name for d in found)})")
    return next(d for d in found if "cuda:sm_90" in d.device_class.targets)


@pytest.fixture(scope="module")
def device() -> LocalDevice:
    return _nvidia_device()


@pytest.fixture(scope="module")
def bundle(device: LocalDevice, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, BundleManifest]:
    pytest.importorskip("triton", reason="building the test bundle needs Triton on this host")
    from pipeline.build.bundle import build_bundle
    from pipeline.build.suite_loader import locate_suite, resolve_commit

    tmp = tmp_path_factory.mktemp("cuda")
    repo = make_suite_repo(tmp, triton_suite_files([OK, WRONG, UNWRITTEN]))
    location = locate_suite(repo / "kernels")
    return build_bundle(location=location, sha=resolve_commit(location), targets=["cuda:sm_90"],
                        out_dir=tmp / "bundles", cache_dir=tmp / "cache", workers=2)


@pytest.mark.gpu
def test_inputs_made_on_the_gpu_draw_what_the_host_draws(device: LocalDevice) -> None:
    """Issue 30: inputs are made on the GPU (torch) from the host's quantile tables: bf16 values are the
    host table's, never zero, N(0, 1) or U[-1, 1); the same seed draws the same values, another does not."""
    torch = pytest.importorskip("torch", reason="inputs are made on the GPU with torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU here")
    from pipeline.agents.runners.device_inputs import device_inputs
    from pipeline.agents.runners.inputs import quantile_midpoints
    from pipeline.contracts import TensorSpec

    normal = TensorSpec(name="x", role="input", shape=[1024, 1000], dtype="bf16", init="normal")
    uniform = TensorSpec(name="y", role="input", shape=[3, 100_000], dtype="f32", init="uniform")
    maker = device_inputs(0, np.random.default_rng(3))
    assert maker is not None and maker.can_make(normal) and maker.can_make(uniform)
    assert not maker.can_make(TensorSpec(name="i", role="input", shape=[8], dtype="i32", init="randint", low=0,
                                         high=4))
    bits = maker.make(normal).cpu().numpy().view(np.uint16)
    assert bits.shape == (1024, 1000)
    table = set(bf16_bits(quantile_midpoints("normal").astype(np.float32)).tolist())
    assert set(np.unique(bits).tolist()) <= table
    values = bf16_values(bits)
    assert not np.any(values == 0) and abs(float(values.mean())) < 0.01 and abs(float(values.std()) - 1) < 0.01
    drawn = maker.make(uniform).cpu().numpy()
    assert drawn.dtype == np.float32 and drawn.min() >= -1 and drawn.max() < 1 and not np.any(drawn == 0)
    assert abs(float(drawn.mean())) < 0.01
    again = device_inputs(0, np.random.default_rng(3))
    other = device_inputs(0, np.random.default_rng(4))
    assert again is not None and other is not None
    first = again.make(normal).cpu().numpy().view(np.uint16)
    np.testing.assert_array_equal(first, bits)
    assert not np.array_equal(other.make(normal).cpu().numpy().view(np.uint16), bits)


@pytest.mark.gpu
def test_triton_gemm_runs_through_the_driver_api(bundle: tuple[Path, BundleManifest], device: LocalDevice) -> None:
    from pipeline.agents.local import run_bundle

    bundle_dir, manifest = bundle
    assert all(e.status == "built" for e in manifest.entries), [e.error for e in manifest.entries]
    document = parse_result(run_bundle(bundle_dir=bundle_dir, manifest=manifest, device=device, run_id="gpu-1",
                                       job_id="job-1", settings=FAST).model_dump_json())
    results = {r.case: r for r in document.results}
    for r in document.results:
        print(r.case, r.status, r.correctness, r.stats.median if r.stats else None, r.reason)

    ok = results[triton_case_id(OK)]
    assert ok.status == "ok", ok.reason
    assert ok.correctness is not None and ok.correctness.passed and ok.correctness.max_abs_error > 0
    assert ok.stats is not None and all(0 < s < 0.01 for s in ok.samples)

    wrong = results[triton_case_id(WRONG)]
    assert wrong.status == "wrong" and not wrong.samples and wrong.correctness is not None
    assert not wrong.correctness.passed

    unwritten = results[triton_case_id(UNWRITTEN)]
    assert unwritten.status == "wrong" and unwritten.correctness is not None
    assert "64x64" not in (unwritten.reason or "") and "elements outside" in (unwritten.reason or "")
    assert document.environment.get("cuda_bindings")


def test_nvml_failure_is_recorded_not_swallowed() -> None:
    """Where NVML cannot be had (here: no nvidia-ml-py, or no NVIDIA driver), the reason is noted
    for every case's environment, saying that throttled samples are not discarded."""
    from pipeline.agents.runners.cuda_runner import NVML_NOTE, _Nvml

    if importlib.util.find_spec("pynvml") is not None and nvidia_devices():
        pytest.skip("NVML works on this host; the GPU tests cover it")
    notes: dict[str, str] = {}
    assert _Nvml.open("GPU-00000000-0000-0000-0000-000000000000", notes) is None
    assert "throttled samples not discarded" in notes[NVML_NOTE] and notes[NVML_NOTE].startswith("unavailable (")


@pytest.mark.gpu
def test_unknown_gpu_uuid_is_an_error_naming_it(device: LocalDevice) -> None:
    from pipeline.agents.runners.cuda_runner import CudaDevice, CudaError

    missing = "GPU-00000000-0000-0000-0000-000000000000"
    with pytest.raises(CudaError, match=f"no GPU with UUID {missing}.*{device.info.uid}"):
        CudaDevice(missing)
    assert CudaDevice(device.info.uid).notes.get("nvml") is None or importlib.util.find_spec("pynvml") is None


@pytest.mark.gpu
def test_results_say_when_nvml_is_missing(bundle: tuple[Path, BundleManifest], device: LocalDevice,
                                          tmp_path: Path) -> None:
    """nvidia-ml-py made unimportable in a child process (a host without it): the case's result
    says that no clock was read and throttled samples were not discarded, and claims no discards."""
    import json
    import subprocess
    import sys

    bundle_dir, _ = bundle
    script = f"""
import sys, json
sys.modules["pynvml"] = None   # as on a host without nvidia-ml-py: import fails
from pipeline.agents.devices import nvidia_devices
from pipeline.agents.local import run_bundle
from pipeline.build.bundle import load_bundle
from pipeline.config import MeasurementSettings
device = next(d for d in nvidia_devices() if d.info.uid == {device.info.uid!r})
settings = MeasurementSettings.model_validate_json({FAST.model_dump_json()!r})
doc = run_bundle(bundle_dir={str(bundle_dir)!r}, manifest=load_bundle({str(bundle_dir)!r}), device=device,
                 run_id="gpu-2", job_id="job-2", settings=settings)
print(json.dumps({{r.case: r.environment for r in doc.results if r.status == "ok"}}))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    environments = json.loads(proc.stdout.strip().splitlines()[-1])
    ok = environments[triton_case_id(OK)]
    assert "throttled samples not discarded" in ok["nvml"] and "throttled_samples_discarded" not in ok, ok


@pytest.mark.gpu
def test_a_slow_host_stays_out_of_the_sample(device: LocalDevice) -> None:
    """The host stalls 300 us after the start event is queued, then launches a tiny memset: gated,
    the GPU waits for the whole queue and the sample is the memset's microseconds; ungated, the stall
    is inside the sample (the L2 flush hides ~30 us of host time, not 300)."""
    import time

    cuda = CudaDevice(device.info.uid)
    assert "timing_gate" not in cuda.notes, cuda.notes
    target = cuda.alloc(4096)

    def slow_host_then_memset() -> None:
        until = time.perf_counter() + 300e-6
        while time.perf_counter() < until:
            pass
        cuda._call(cuda._cu.cuMemsetD32Async, cuda._cu.CUdeviceptr(target), 7, 1024, cuda.stream)

    gated = sorted(cuda.time_once(slow_host_then_memset) for _ in range(50))
    ungated = sorted(cuda.time_once(slow_host_then_memset, gated=False) for _ in range(50))
    cuda.free(target)
    assert gated[25] < 50e-6, gated[25]
    assert ungated[25] > 200e-6, ungated[25]


@pytest.mark.gpu
def test_free_memory_is_read_from_the_device(device: LocalDevice) -> None:
    """The job's copy plan reads the free memory (`CudaDevice.free_bytes`): a 1 GiB allocation shows in it."""
    from pipeline.agents.runners.cuda_runner import CudaDevice

    gpu = CudaDevice(device.info.uid)
    before = gpu.free_bytes()
    ptr = gpu.alloc(1 << 30)
    try:
        after = gpu.free_bytes()
    finally:
        gpu.free(ptr)
    assert 0 < after < before and before - after >= 1 << 30, (before, after)
