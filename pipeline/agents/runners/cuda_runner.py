"""Run one bundle entry (a cubin) through the CUDA driver API: verify, check, then time.

No Triton and no compiler on the agent host: `cuda.bindings.driver` (cuda-python) loads the cubin
the builder made, and it is imported lazily, so hosts without NVIDIA software import this module.

Order per entry (docs/design.md, "Measurement"): verify the cubin's sha256; make fresh random inputs
(bf16 as uint16 bit patterns on the device; the NumPy reference gets float32 arrays holding the same
values, made only when the check runs); fill every output with a NaN pattern, so elements the kernel never writes
fail the check; launch once and compare with the float64 reference (a wrong kernel is never
timed); then time with CUDA events around the kernel alone, with L2 flushed (a buffer twice the
L2 size written) before each sample, the GPU held at a gate until the host has queued all of it (so
that the host's speed never enters a sample: `CudaDevice.time_once`), and the SM clock and the GPU temperature read through NVML with
each sample where nvidia-ml-py is importable. The device's default SM clock (NVML's default
application clock, else its maximum, else the driver's clock-rate attribute) is what the agent
discards throttled samples against.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.agents.runners import CheckedKernel, Workspace
from pipeline.agents.runners.checking import check_against_reference
from pipeline.agents.runners.device_inputs import HostInputs, device_inputs
from pipeline.agents.runners.inputs import bf16_bits, bf16_values, random_bf16, random_values
from pipeline.agents.runners.iree_runner import verify_artifact
from pipeline.contracts import BundleEntry, CaseResult, Correctness, TensorSpec

__all__ = [
    "CudaDevice", "CudaError", "prepare_entry", "make_input", "make_inputs", "reference_view", "finite", "HOST_DTYPES",
    "bf16_bits", "bf16_values",
]

POISON_BYTE = 0xFF          # every float width: all-ones is a NaN
L2_FLUSH_FACTOR = 2         # flush with a buffer twice the L2 size
MAX_STATIC_SHARED = 48 * 1024
HOST_DTYPES = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": np.uint16,
                "i64": np.int64, "i32": np.int32, "i8": np.int8}
_SCALAR_CTYPES = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "fp32": ctypes.c_float}


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


def make_input(spec: TensorSpec, rng: np.random.Generator) -> np.ndarray:
    """Input `spec` made on the host, as the device stores it (bf16: uint16 bit patterns). Never zeros."""
    if spec.dtype == "bf16":   # bf16 has no NumPy dtype: bit patterns (uint16) on the device
        return random_bf16(spec, rng)
    values = random_values(spec, rng, normal_dtype=np.float32)
    return np.ascontiguousarray(values.astype(HOST_DTYPES[spec.dtype]))


def make_inputs(tensors: Sequence[TensorSpec], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Every input made on the host (`make_input`), by name."""
    return {spec.name: make_input(spec, rng) for spec in tensors if spec.role == "input"}


def reference_view(spec: TensorSpec, host: np.ndarray) -> np.ndarray:
    """The array the reference gets for input `host` (bf16: float32 holding the same values), made
    when a check runs: a binary whose check is cached times on its inputs without these copies,
    twice the size of its bf16 inputs."""
    return bf16_values(host) if spec.dtype == "bf16" else host


# ---- the device ---------------------------------------------------------------------------------

def _uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class CudaDevice:
    """One GPU's primary context, a stream, events and an L2 flush buffer, shared by a run's entries."""

    def __init__(self, uid: str | None = None):
        """The GPU whose UUID is `uid` (None: GPU 0); an unknown UUID is an error naming it (never
        another GPU). `notes` records what measurement lacks on it (NVML), for every case's result."""
        from cuda.bindings import driver  # agents with NVIDIA GPUs only

        self._cu = driver
        self._call(driver.cuInit, 0)
        count = self._call(driver.cuDeviceGetCount)
        uuids = [_uuid_text(bytes(self._call(driver.cuDeviceGetUuid, self._call(driver.cuDeviceGet, i)).bytes))
                 for i in range(count)]
        if uid is not None and uid not in uuids:
            raise CudaError(f"no GPU with UUID {uid} on this host (CUDA sees {', '.join(uuids) or 'no GPU'})")
        ordinal = uuids.index(uid) if uid is not None else 0
        self.ordinal = ordinal
        self.device = self._call(driver.cuDeviceGet, ordinal)
        self.context = self._call(driver.cuDevicePrimaryCtxRetain, self.device)
        self._call(driver.cuCtxSetCurrent, self.context)
        self.stream = self._call(driver.cuStreamCreate, 0)
        self.start, self.end = self._call(driver.cuEventCreate, 0), self._call(driver.cuEventCreate, 0)
        attr = driver.CUdevice_attribute
        self.l2_bytes = self._call(driver.cuDeviceGetAttribute, attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, self.device)
        self.flush_words = max(self.l2_bytes * L2_FLUSH_FACTOR // 4, 1 << 20)
        self.flush_buffer = self.alloc(self.flush_words * 4)
        self._flushes = 0
        self.notes: dict[str, str] = {}
        self._gate = self._open_gate()
        self._gate_value = 0
        self._nvml = _Nvml.open(uuids[ordinal], self.notes)
        rate_khz = self._call(driver.cuDeviceGetAttribute, attr.CU_DEVICE_ATTRIBUTE_CLOCK_RATE, self.device)
        nvml_default = self._nvml.default_sm_clock_mhz() if self._nvml else None
        # Without NVML no sample has a clock, so none can be judged throttled: no default clock then
        # (a result does not claim "0 throttled samples discarded"), and `notes` says why.
        self.default_clock_mhz: float | None = (
            (nvml_default or (rate_khz / 1000.0 if rate_khz else None)) if self._nvml else None)

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        result = fn(*args)
        err, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
        if err != self._cu.CUresult.CUDA_SUCCESS:
            _, name = self._cu.cuGetErrorName(err)
            raise CudaError(f"{fn.__name__} failed: {name.decode() if isinstance(name, bytes) else name}")
        return rest[0] if len(rest) == 1 else (rest or None)

    @property
    def stream_handle(self) -> int:
        """The stream's CUstream value, for frameworks that launch onto it (torch.cuda.ExternalStream)."""
        return int(self.stream)

    def alloc(self, nbytes: int) -> int:
        return int(self._call(self._cu.cuMemAlloc, max(nbytes, 1)))   # 256-byte aligned

    def free_bytes(self) -> int:
        """Device memory free now (cuMemGetInfo), for the job's plan of buffer copies."""
        free, _total = self._call(self._cu.cuMemGetInfo)
        return int(free)

    def trim(self) -> None:
        """Give back to the device what torch's caching allocator keeps of released tensors (vendor
        controls, references): buffers here come from cuMemAlloc, which that cache never yields to, so a
        job timed in groups (or an agent's next job) would find the memory taken."""
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()
            # cuBLAS keeps a workspace per stream, and each job's device has a stream of its own
            clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
            if callable(clear_workspaces):
                clear_workspaces()
            torch.cuda.empty_cache()

    def free(self, ptr: int) -> None:
        self._call(self._cu.cuMemFree, self._cu.CUdeviceptr(ptr))

    def upload(self, ptr: int, host: np.ndarray) -> None:
        self._call(self._cu.cuMemcpyHtoD, self._cu.CUdeviceptr(ptr), np.ascontiguousarray(host), host.nbytes)

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        """Device-to-device copy, done when this returns (on the context's default stream, so the whole
        context is synchronized: a copy from another framework's tensor is finished before it is freed)."""
        self._call(self._cu.cuMemcpyDtoD, self._cu.CUdeviceptr(dst), self._cu.CUdeviceptr(src), nbytes)
        self._call(self._cu.cuCtxSynchronize)

    def download(self, ptr: int, host: np.ndarray) -> np.ndarray:
        self._call(self._cu.cuMemcpyDtoH, host, self._cu.CUdeviceptr(ptr), host.nbytes)
        return host

    def poison(self, ptr: int, nbytes: int) -> None:
        self._call(self._cu.cuMemsetD8, self._cu.CUdeviceptr(ptr), POISON_BYTE, nbytes)

    def load(self, cubin: bytes, entry_point: str, shared_bytes: int) -> Any:
        module = self._call(self._cu.cuModuleLoadData, cubin)
        function = self._call(self._cu.cuModuleGetFunction, module, entry_point.encode())
        if shared_bytes > MAX_STATIC_SHARED:   # above 48 KiB a kernel must opt in to dynamic shared memory
            attr = self._cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self._call(self._cu.cuFuncSetAttribute, function, attr, shared_bytes)
        return function

    def launch(self, function: Any, grid: Sequence[int], threads: int, shared_bytes: int, params: _Params) -> None:
        gx, gy, gz = (list(grid) + [1, 1])[:3]
        self._call(self._cu.cuLaunchKernel, function, gx, gy, gz, threads, 1, 1, shared_bytes, self.stream,
                   params.address, 0)

    def synchronize(self) -> None:
        self._call(self._cu.cuStreamSynchronize, self.stream)

    def flush_l2(self) -> None:
        """Write the flush buffer (a new value each time) on the stream: L2 holds none of the kernel's data."""
        self._flushes += 1
        self._call(self._cu.cuMemsetD32Async, self._cu.CUdeviceptr(self.flush_buffer), self._flushes,
                   self.flush_words, self.stream)

    def _open_gate(self) -> tuple[int, Any, ctypes.c_uint32] | None:
        """A word of pinned host memory the stream can wait on (cuStreamWaitValue32); None, and why in
        `notes` (`GATE_NOTE`), where the driver refuses it: samples are then taken ungated."""
        cu = self._cu
        try:
            host = self._call(cu.cuMemHostAlloc, 4, cu.CU_MEMHOSTALLOC_DEVICEMAP | cu.CU_MEMHOSTALLOC_PORTABLE)
            device_ptr = self._call(cu.cuMemHostGetDevicePointer, host, 0)
        except CudaError as exc:
            self.notes[GATE_NOTE] = f"unavailable ({exc}): the host's launch time can enter small samples"
            return None
        word = ctypes.c_uint32.from_address(int(host))
        word.value = 0
        return int(host), device_ptr, word

    def time_once(self, run: Callable[[], None], *, gated: bool = True) -> float:
        """Seconds between events recorded right before and after `run` on the stream (L2 flushed first).

        `gated`: after the flush the stream waits on a host word, which the host sets once the events
        and `run`'s work are all queued. Ungated, the start event fires when the flush ends, and a host
        slower than the flush (a Python launch path: a torch graph replay; a busy or virtualised CPU)
        leaves the GPU idle inside the sample: an H100 saw 6 us cases of vendor controls read 13-18 us
        in whole rounds of one job and not the other. Only for `run`s that never wait on the GPU
        (a kernel launch, a graph replay): one that synchronised would wait for the gate forever.
        """
        gate = self._gate if gated else None
        # the flush goes ahead of the gate: the GPU flushes while the host queues the rest (an H100
        # nightly's 2.3 million samples took ~45 us more each with the flush held at the gate too)
        self.flush_l2()
        if gate is not None:
            self._gate_value += 1   # the stream waits until the word reaches this sample's value
            self._call(self._cu.cuStreamWaitValue32, self.stream, gate[1], self._gate_value,
                       self._cu.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ)
        try:
            self._call(self._cu.cuEventRecord, self.start, self.stream)
            run()
            self._call(self._cu.cuEventRecord, self.end, self.stream)
        finally:
            if gate is not None:
                gate[2].value = self._gate_value   # the GPU may go: everything is queued
        self._call(self._cu.cuEventSynchronize, self.end)
        return float(self._call(self._cu.cuEventElapsedTime, self.start, self.end)) * 1e-3

    def sm_clock_mhz(self) -> float | None:
        return self._nvml.sm_clock_mhz() if self._nvml else None

    def temperature_c(self) -> float | None:
        return self._nvml.temperature_c() if self._nvml else None

    def record_reading(self, checked: CheckedKernel) -> None:
        """Append the SM clock and the temperature, read now, to a kernel's per-call readings."""
        checked.clocks_mhz.append(self.sm_clock_mhz())
        checked.temperatures_c.append(self.temperature_c())


GATE_NOTE = "timing_gate"
"""The `notes` key saying the stream could not be held at a host gate (`CudaDevice.time_once`)."""

NVML_NOTE = "nvml"
"""The `notes` (and so every case's environment) key saying NVML failed and what that turned off."""


class _Nvml:
    """The SM clock and temperature through NVML (nvidia-ml-py). Failures are recorded in `notes`
    (`NVML_NOTE`): without NVML there are no clocks, so throttled samples cannot be discarded, and a
    result must say so rather than look like one taken with the check on."""

    def __init__(self, module: Any, handle: Any, notes: dict[str, str]):
        self._nvml, self._handle, self._notes = module, handle, notes

    @classmethod
    def open(cls, uid: str, notes: dict[str, str]) -> _Nvml | None:
        """NVML's handle of the GPU `uid`; None (and why, in `notes`) when it cannot be had."""
        try:
            import pynvml
        except ImportError as exc:
            notes[NVML_NOTE] = f"unavailable (nvidia-ml-py: {exc}): no SM clocks read, throttled samples not discarded"
            return None
        try:
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByUUID(uid)
        except Exception as exc:  # pynvml.NVMLError and its subclasses, one per NVML return code
            notes[NVML_NOTE] = (f"unavailable ({type(exc).__name__}: {exc}): no SM clocks read, throttled samples "
                                "not discarded")
            return None
        return cls(pynvml, handle, notes)

    def _read(self, what: str, read: Callable[[], Any]) -> float | None:
        """One reading; a failure is noted once (the samples concerned carry no clock or temperature)."""
        try:
            return float(read())
        except Exception as exc:  # pynvml.NVMLError
            self._notes.setdefault(f"{NVML_NOTE}_{what}", f"read failed ({type(exc).__name__}: {exc}); "
                                   "samples without it are not judged")
            return None

    def sm_clock_mhz(self) -> float | None:
        return self._read("sm_clock", lambda: self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))

    def temperature_c(self) -> float | None:
        return self._read("temperature", lambda: self._nvml.nvmlDeviceGetTemperature(
            self._handle, self._nvml.NVML_TEMPERATURE_GPU))

    def default_sm_clock_mhz(self) -> float | None:
        """The clock an unthrottled GPU runs its SMs at: the default application clock, else the maximum."""
        for read in (self._nvml.nvmlDeviceGetDefaultApplicationsClock, self._nvml.nvmlDeviceGetMaxClockInfo):
            try:
                value = float(read(self._handle, self._nvml.NVML_CLOCK_SM))
            except Exception:
                continue
            if value > 0:
                return value
        return None


@dataclass
class _Params:
    """The kernel's parameter block: one slot per parameter, and the void* array cuLaunchKernel takes."""

    slots: list[Any]
    array: Any = field(init=False)

    def __post_init__(self) -> None:
        self.array = (ctypes.c_void_p * len(self.slots))(*[ctypes.addressof(s) for s in self.slots])

    @property
    def address(self) -> int:
        return ctypes.addressof(self.array)


def _params(entry: BundleEntry, pointers: dict[str, int]) -> _Params:
    assert entry.launch is not None and entry.launch.parameters is not None
    slots: list[Any] = []
    for param in entry.launch.parameters:
        if param.tensor is not None:
            slots.append(ctypes.c_uint64(pointers[param.tensor]))
        else:
            # a scalar: KernelParam's validator holds its dtype and value (an int for i32 and i64)
            slots.append(_SCALAR_CTYPES[param.dtype](param.value))  # type: ignore[index, arg-type]
    slots.extend(ctypes.c_uint64(0) for _ in range(entry.launch.null_pointers))
    return _Params(slots)


def finite(correctness: Correctness) -> Correctness:
    """Errors of NaN outputs (poison left unwritten) are infinite; documents carry finite numbers, so
    they are reported as the largest float (the detail names the elements)."""
    big = float(np.finfo(np.float64).max)
    return correctness.model_copy(update={
        "max_abs_error": min(correctness.max_abs_error, big), "max_rel_error": min(correctness.max_rel_error, big),
    })


# ---- one entry ----------------------------------------------------------------------------------

def _workspace(device: CudaDevice, entry: BundleEntry, rng: np.random.Generator,
               placements: int) -> Workspace:
    """Copies of every tensor of the entry on the device, each with the same input values, made on the
    device where torch with CUDA is here (`device_inputs`), else on the host; `memo["inputs"]` gives
    their host arrays to a check (`HostInputs`)."""
    specs = {t.name: t for t in entry.tensors}
    sets: list[dict[str, int]] = []

    def release() -> None:
        for pointers in sets:
            for ptr in pointers.values():
                device.free(ptr)
        sets.clear()

    maker = device_inputs(device.ordinal, rng)
    on_host: dict[str, np.ndarray] = {}
    try:
        for _ in range(max(1, placements)):
            sets.append({name: device.alloc(spec.nbytes) for name, spec in specs.items()})
        for name, spec in specs.items():
            if spec.role != "input":
                continue
            if maker is not None and maker.can_make(spec):
                made = maker.make(spec)
                maker.synchronize()   # torch's stream is not ours: the values are there before they are copied
                for pointers in sets:
                    device.copy(pointers[name], made.data_ptr(), spec.nbytes)
                del made
            else:
                on_host[name] = make_input(spec, rng)
                for pointers in sets:
                    device.upload(pointers[name], on_host[name])
    except Exception:
        release()
        raise
    workspace = Workspace(sets=sets, release=release)

    def download(name: str) -> np.ndarray:
        spec = specs[name]
        return device.download(sets[0][name], np.empty(spec.shape, dtype=HOST_DTYPES[spec.dtype]))

    workspace.memo["inputs"] = HostInputs(on_host, download)
    return workspace


def prepare_entry(
    *,
    device: CudaDevice,
    bundle_dir: Path,
    entry: BundleEntry,
    reference_fn: Callable[..., Any],
    rng: np.random.Generator,
    placements: int = 1,
    workspace: Workspace | None = None,
    verified: Correctness | None = None,
) -> CheckedKernel | CaseResult:
    """Load, launch once on fresh inputs into poisoned outputs and check: a CheckedKernel, or a
    `wrong` CaseResult. Raises on errors (the caller turns them into status error). The keyword
    arguments after `rng` are the runners' shared ones (`pipeline.agents.runners`)."""
    launch = entry.launch
    assert launch is not None and entry.reference is not None
    if launch.parameters is None or launch.grid is None or launch.threads is None or launch.shared_bytes is None:
        raise ValueError(f"entry {entry.case} has no CUDA launch description (parameters, grid, threads, shared)")
    cubin = verify_artifact(bundle_dir, entry)
    function = device.load(cubin, launch.entry_point, launch.shared_bytes)
    specs = {t.name: t for t in entry.tensors}
    own = workspace is None
    if workspace is None:
        workspace = _workspace(device, entry, rng, placements)
    params = [_params(entry, pointers) for pointers in workspace.sets]
    ws, grid, threads, shared_bytes = workspace, launch.grid, launch.threads, launch.shared_bytes   # as checked above

    def run() -> None:
        device.launch(function, grid, threads, shared_bytes, params[ws.current])

    def release() -> None:
        if own:
            ws.release()

    correctness = verified
    if correctness is None:
        inputs = ws.memo["inputs"]
        inputs.fetch(launch.arguments)   # before the launch: the reference reads what the kernel was given
        pointers = ws.sets[0]
        for name, spec in specs.items():
            if spec.role == "output":
                device.poison(pointers[name], spec.nbytes)
        ws.select(0)
        run()
        device.synchronize()
        got = []
        for name in launch.results:
            spec = specs[name]
            host = device.download(pointers[name], np.empty(spec.shape, dtype=HOST_DTYPES[spec.dtype]))
            got.append(bf16_values(host) if spec.dtype == "bf16" else host)
        correctness = finite(check_against_reference(
            got, [reference_view(specs[name], inputs[name]) for name in launch.arguments], reference_fn,
            launch.results, entry.reference, rng,
            memo=ws.memo))
    if not correctness.passed:
        release()
        return CaseResult(
            case=entry.case, target=entry.target, status="wrong",
            reason=f"correctness check failed: {correctness.detail}", correctness=correctness,
        )
    # device.notes itself, not a copy: an NVML reading that fails while timing is on the result too
    checked = CheckedKernel(entry=entry, correctness=correctness, run_once=lambda: 0.0, release=release,
                            default_clock_mhz=device.default_clock_mhz, workspace=ws, environment=dict(device.notes))

    def run_once() -> float:
        seconds = device.time_once(run)
        device.record_reading(checked)
        return seconds

    checked.run_once = run_once
    return checked


def launch_once(device: CudaDevice, bundle_dir: Path, entry: BundleEntry, rng: np.random.Generator) -> None:
    """Verify and load the entry's cubin, make its inputs from `rng` (the check's, given the check's
    seed) and launch it once, synchronously; everything freed after. What a profiler watches
    (`pipeline.agents.counters`): one launch of the kernel and nothing else on the GPU (no L2 flush,
    no gate, no reference)."""
    launch = entry.launch
    if launch is None or launch.parameters is None or launch.grid is None or launch.threads is None \
            or launch.shared_bytes is None:
        raise ValueError(f"entry {entry.case} has no CUDA launch description (parameters, grid, threads, shared)")
    function = device.load(verify_artifact(bundle_dir, entry), launch.entry_point, launch.shared_bytes)
    workspace = _workspace(device, entry, rng, 1)
    try:
        device.launch(function, launch.grid, launch.threads, launch.shared_bytes, _params(entry, workspace.sets[0]))
        device.synchronize()
    finally:
        workspace.release()
