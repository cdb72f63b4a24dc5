"""Run one bundle entry with the IREE runtime: verify, check against the reference, then time.

Order per entry (docs/design.md, "Measurement"): verify the artifact's sha256, make fresh random
inputs, upload them once (one copy per placement the agent asks for), run once and compare with the
float64 reference (a wrong kernel is never timed). What passes is a `CheckedKernel` whose `run_once`
times one synchronous call on the workspace's current copy; `local.run_bundle` samples it in rounds.
On `local-sync` (the CPU default: the call runs on the calling thread) a sample is the thread's CPU time
over the call, which is its wall time unless another process took the core meanwhile: on this 2-core VM
beside test runs, a 70 ms decode GEMM's wall time went to 89-255 ms under busy processes, its CPU time
stayed 60-70 ms. How long the thread was off the CPU is kept (`measure.preempted`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.agents.runners import CheckedKernel, Workspace
from pipeline.agents.runners.inputs import random_values
from pipeline.contracts import BundleEntry, CaseResult, Correctness, TensorSpec
from pipeline.contracts.manifest import ReferenceSpec

__all__ = ["ArtifactError", "IreeDevice", "verify_artifact", "make_inputs", "check_outputs", "prepare_entry"]

_NUMPY_DTYPES = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "i64": np.int64, "i32": np.int32, "i8": np.int8}
MAX_DETAIL_MISMATCHES = 3


class ArtifactError(RuntimeError):
    """The artifact is missing or its bytes are not the ones the manifest names."""


class IreeDevice:
    """One IREE HAL device (e.g. `local-sync`) shared by every entry of a run."""

    def __init__(self, driver: str):
        import iree.runtime as rt  # agents only: the builder never needs the runtime

        self._rt = rt
        self.driver = driver
        self.config = rt.Config(driver)

    def load(self, data: bytes, entry_point: str) -> Callable[..., Any]:
        rt = self._rt
        module = rt.VmModule.copy_buffer(self.config.vm_instance, data)
        context = rt.SystemContext(vm_modules=[module], config=self.config)
        function: Callable[..., Any] = context.modules[module.name][entry_point]
        return function

    def upload(self, array: np.ndarray) -> Any:
        return self._rt.asdevicearray(self.config.device, array)


def verify_artifact(bundle_dir: Path, entry: BundleEntry) -> bytes:
    assert entry.artifact is not None
    path = Path(bundle_dir) / entry.artifact.path
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ArtifactError(f"artifact {entry.artifact.path} unreadable: {exc}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry.artifact.sha256:
        raise ArtifactError(
            f"artifact {entry.artifact.path} has sha256 {digest[:16]}..., the manifest says {entry.artifact.sha256[:16]}..."
        )
    return data


def make_inputs(tensors: Sequence[TensorSpec], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Fresh random inputs (never zeros), drawn per `TensorSpec.init` (`inputs.random_values`)."""
    arrays = {}
    for spec in tensors:
        if spec.role != "input":
            continue
        dtype = _NUMPY_DTYPES.get(spec.dtype)
        if dtype is None:
            raise ValueError(f"tensor {spec.name}: dtype {spec.dtype} is not supported by the IREE runner")
        values = random_values(spec, rng)
        arrays[spec.name] = np.ascontiguousarray(values.astype(dtype))
    return arrays


def check_outputs(
    outputs: Sequence[np.ndarray], expected: Sequence[np.ndarray], names: Sequence[str], reference: ReferenceSpec,
) -> Correctness:
    """Pass when every element has |out - ref| <= atol + rtol * |ref| (NumPy's isclose), all finite."""
    max_abs = max_rel = 0.0
    problems: list[str] = []
    if len(outputs) != len(expected):
        problems.append(f"kernel returned {len(outputs)} results, the reference {len(expected)}")
    for name, out, ref in zip(names, outputs, expected):
        got = np.asarray(out, dtype=np.float64)
        want = np.asarray(ref, dtype=np.float64)
        if got.shape != want.shape:
            problems.append(f"{name}: shape {list(got.shape)}, expected {list(want.shape)}")
            continue
        err = np.abs(got - want)
        err = np.where(np.isfinite(err), err, np.inf)
        rel = err / np.maximum(np.abs(want), np.finfo(np.float64).tiny)
        max_abs = max(max_abs, float(err.max(initial=0.0)))
        max_rel = max(max_rel, float(rel.max(initial=0.0)))
        bad = ~(err <= reference.atol + reference.rtol * np.abs(want))
        if bad.any():
            idx = np.argwhere(bad)[:MAX_DETAIL_MISMATCHES]
            where = "; ".join(f"at {tuple(int(i) for i in ix)} got {got[tuple(ix)]:.6g}, expected {want[tuple(ix)]:.6g}" for ix in idx)
            problems.append(f"{name}: {int(bad.sum())}/{bad.size} elements outside atol+rtol*|ref| ({where})")
    return Correctness(
        passed=not problems, max_abs_error=max_abs, max_rel_error=max_rel,
        atol=reference.atol, rtol=reference.rtol, detail="; ".join(problems),
    )


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def prepare_entry(
    *,
    device: IreeDevice,
    bundle_dir: Path,
    entry: BundleEntry,
    reference_fn: Callable[..., Any],
    rng: np.random.Generator,
    placements: int = 1,
    workspace: Workspace | None = None,
    verified: Correctness | None = None,
) -> CheckedKernel | CaseResult:
    """Load and check one built entry: a CheckedKernel, or a `wrong` CaseResult; raises on errors
    (the caller turns them into status error). The inputs are uploaded once per buffer copy and
    reused by every timed call (the runners' shared keyword arguments: `pipeline.agents.runners`);
    IREE allocates each call's results itself."""
    assert entry.launch is not None and entry.reference is not None
    data = verify_artifact(bundle_dir, entry)
    kernel = device.load(data, entry.launch.entry_point)
    own = workspace is None
    if workspace is None:
        inputs = make_inputs(entry.tensors, rng)
        args = [inputs[name] for name in entry.launch.arguments]
        workspace = Workspace(sets=[[device.upload(a) for a in args] for _ in range(max(1, placements))])
        workspace.memo["arguments"] = args
        workspace.release = workspace.sets.clear
    ws = workspace
    correctness = verified
    if correctness is None:
        outputs = [np.asarray(r.to_host()) for r in _as_tuple(kernel(*ws.sets[0]))]
        if "expected" not in ws.memo:
            ws.memo["expected"] = [np.asarray(r) for r in _as_tuple(reference_fn(*ws.memo["arguments"]))]
        correctness = check_outputs(outputs, ws.memo["expected"], entry.launch.results, entry.reference)
    if not correctness.passed:
        if own:
            ws.release()
        return CaseResult(
            case=entry.case, target=entry.target, status="wrong",
            reason=f"correctness check failed: {correctness.detail}", correctness=correctness,
        )

    off_cpu: list[float] = []

    def run_once() -> float:
        args = ws.sets[ws.current]
        cpu, start = time.thread_time_ns(), time.perf_counter_ns()
        kernel(*args)   # synchronous on local-sync: returns when the dispatch is done, on this thread
        wall, cpu = time.perf_counter_ns() - start, time.thread_time_ns() - cpu
        if not on_this_thread or cpu <= 0:
            # a thread CPU clock that did not advance over a call (seen on a loaded 2-core VM) tells
            # nothing of it: the wall time does, preemption and all
            return wall * 1e-9
        off_cpu.append(max(0, wall - cpu) * 1e-9)
        return min(wall, cpu) * 1e-9

    def release() -> None:
        if own:
            ws.release()

    # only local-sync runs a call on the calling thread (its CPU time is the call's, without the time
    # slices other processes took meanwhile); another driver's workers leave it waiting: wall time
    on_this_thread = device.driver == "local-sync"
    return CheckedKernel(entry=entry, correctness=correctness, run_once=run_once, workspace=ws, release=release,
                         off_cpu_s=off_cpu)
