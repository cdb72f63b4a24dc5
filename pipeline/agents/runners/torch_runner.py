"""Run a vendor control (a bundle entry with `launch.torch`) through PyTorch: cuBLAS, cuDNN, SDPA.

Nothing is compiled for these entries; the agent host needs torch with CUDA, and where it has none the
case is skipped with the reason TORCH_MISSING. The check and the timing are the CUDA runner's: fresh
random inputs made as the CUDA runner makes them (on the GPU: `device_inputs`), outputs poisoned with NaN where the
operator writes into a given tensor (matmul, index ops; SDPA and conv2d allocate theirs), the same
reference and check (`checking.check_against_reference`), and `CudaDevice.time_once` for every
sample: torch launches onto the device's own stream (torch.cuda.ExternalStream), so the CUDA events
bracket the operator alone and the L2 flush and SM clock reading are the ones every CUDA sample gets.

What is timed is the operator captured in a CUDA graph (one graph per buffer copy of the case's
workspace, each capturing the operator on that copy's tensors; a paired base captures its own graphs
on its head's copies) (`torch.cuda.CUDAGraph`) and replayed
between the events: an eager PyTorch call spends 20-30 us of host time (dispatch, checks, launch) that
the events would count for small shapes, a graph replay only the launch of the graph, which the L2
flush before the start event hides. The flush stays outside the graph. Where capture fails the
operator is timed eagerly and the case's environment says why (`timing: eager`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.agents.runners import CheckedKernel, Workspace
from pipeline.agents.runners.checking import check_against_reference
from pipeline.agents.runners.cuda_runner import (
    HOST_DTYPES,
    CudaDevice,
    bf16_values,
    finite,
    make_input,
    reference_view,
)
from pipeline.agents.runners.device_inputs import HostInputs, device_inputs
from pipeline.contracts import BundleEntry, CaseResult, Correctness, LaunchSpec

__all__ = ["TORCH_MISSING", "torch_missing", "prepare_entry", "OPS"]

TORCH_MISSING = "torch not available on this agent"
CHOICE = "_chosen"
"""params key: the environment of the operator first bound on a workspace, so that every copy and a
paired base take the same GQA path."""
GRAPH_WARMUP_CALLS = 3        # eager calls on a side stream before capture (workspaces, lazy initialisation)


def torch_missing() -> str | None:
    """Why vendor controls cannot run here, or None when torch with CUDA is importable."""
    try:
        import torch
    except ImportError:
        return TORCH_MISSING
    return None if torch.cuda.is_available() else f"{TORCH_MISSING} (torch {torch.__version__} sees no CUDA GPU)"


@dataclass
class _Op:
    """One operator bound to its tensors: `run` launches it and returns its results; `environment`
    names what was chosen (backend, GQA path)."""

    run: Callable[[], list[Any]]
    environment: dict[str, str]


# ---- the operators: each takes (tensors by name, the entry's launch, params) -------------------------------

def _matmul(t: dict[str, Any], launch: LaunchSpec, params: dict[str, Any]) -> _Op:
    import torch

    a, b = (t[n] for n in launch.arguments)
    c = t[launch.results[0]]
    return _Op(lambda: [torch.matmul(a, b, out=c)], {"library": "cublas"})


def _sdpa(t: dict[str, Any], launch: LaunchSpec, params: dict[str, Any]) -> _Op:
    """PyTorch's own choice of SDPA backend (its dispatch rules: shape, dtype, device; no timing), with
    GQA by enable_gqa, or by K/V repeated per query head, done once here, where that choice refuses
    enable_gqa.

    Not the fastest backend by a brief trial: timed with the host's clock, a trial measured launch
    overhead rather than the kernels a graph replays, and two processes picked backends 3-5x apart on
    decode shapes (an H100 unpaired A/A: llama3-8b-decode's control +342 %, docs/benchmarks/history.md, issue 11). A
    control must choose the same implementation in every job, or it measures the choice, not the device.
    """
    import torch.nn.functional as F

    q, k, v = (t[n] for n in launch.arguments)
    causal, scale, gqa = bool(params.get("is_causal")), params.get("scale"), bool(params.get("enable_gqa"))
    group = q.shape[1] // k.shape[1]
    chosen = params.get(CHOICE) or {}   # bound before on the same workspace: the same path
    errors = []
    for path in (("enable_gqa", "repeat") if gqa else ("none",)):
        if chosen and path != chosen.get("gqa"):
            continue
        kk, vv = (k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)) if path == "repeat" else (k, v)
        extra = {"enable_gqa": True} if path == "enable_gqa" else {}

        def run(kk: Any = kk, vv: Any = vv, extra: dict[str, bool] = extra) -> list[Any]:
            return [F.scaled_dot_product_attention(q, kk, vv, is_causal=causal, scale=scale, **extra)]
        try:
            run()
        except RuntimeError as exc:
            errors.append(f"{path}: {str(exc).splitlines()[0][:200]}")
            continue
        return _Op(run, {"sdpa_backend": _sdpa_backend(q, kk, vv, causal, scale, extra), "gqa": path})
    raise RuntimeError(f"PyTorch's SDPA does not run this case: {'; '.join(errors)}")


def _sdpa_backend(q: Any, k: Any, v: Any, causal: bool, scale: float | None, extra: dict[str, bool]) -> str:
    """The backend PyTorch's dispatch picks for these tensors (torch._fused_sdp_choice, private:
    "dispatch" where this torch lacks it or it changed)."""
    import torch
    from torch.nn.attention import SDPBackend

    try:
        index = torch._fused_sdp_choice(q, k, v, None, 0.0, causal, scale=scale, **extra)
        return str(SDPBackend(index).name)
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return "dispatch"


def _conv2d(t: dict[str, Any], launch: LaunchSpec, params: dict[str, Any]) -> _Op:
    """NHWC x and KRSC w (depthwise CRS) viewed as NCHW / KCRS in channels_last: no copies."""
    import torch
    import torch.nn.functional as F

    # cuDNN's heuristics choose the algorithm, the same in every process. cudnn.benchmark would time the
    # candidates during warm-up and could pick another one next job: an H100 unpaired A/A saw a depthwise
    # conv's control +48 % and a 3x3's +25 % between two runs of one binary (docs/benchmarks/history.md, issue 11).
    torch.backends.cudnn.benchmark = False
    x, w = (t[n] for n in launch.arguments)
    x_nchw = x.permute(0, 3, 1, 2)
    w_kcrs = (w.unsqueeze(-1) if w.dim() == 3 else w).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
    stride, padding, groups = int(params["stride"]), int(params["padding"]), int(params.get("groups", 1))

    def run() -> list[Any]:
        return [F.conv2d(x_nchw, w_kcrs, stride=stride, padding=padding, groups=groups).permute(0, 2, 3, 1)]
    return _Op(run, {"library": "cudnn", "cudnn": str(torch.backends.cudnn.version())})


def _index_select(t: dict[str, Any], launch: LaunchSpec, params: dict[str, Any]) -> _Op:
    """arguments (x, index) -> result y = x.index_select(dim, index), into a poisoned y."""
    import torch

    x, index = (t[n] for n in launch.arguments)
    y, dim = t[launch.results[0]], int(params.get("dim", 0))
    return _Op(lambda: [torch.index_select(x, dim, index, out=y)], {})


def _index_add(t: dict[str, Any], launch: LaunchSpec, params: dict[str, Any]) -> _Op:
    """arguments (x, index, src) -> result y = x.index_add(dim, index, src), into a poisoned y.

    With `top_k` set, the MoE-combine form on the suite's tensors: arguments (y, pos, w), pos and w
    [T, K] -> out[t, :] = sum_j w[t, j] * y[pos[t, j], :], computed as PyTorch MoE layers do: the
    weighted rows y[pos] * w (fp32) index_add-ed into each token's row (slot t*K + j -> token t)."""
    import torch

    if "top_k" not in params:
        x, index, src = (t[n] for n in launch.arguments)
        y, dim = t[launch.results[0]], int(params.get("dim", 0))
        return _Op(lambda: [torch.index_add(x, dim, index, src, out=y)], {})
    rows, pos, w = (t[n] for n in launch.arguments)
    out, top_k = t[launch.results[0]], int(params["top_k"])
    slots, weights = pos.reshape(-1), w.reshape(-1, 1).float()
    token = torch.arange(slots.numel(), device=slots.device, dtype=torch.int32) // top_k   # routing metadata
    acc = torch.empty(out.shape, dtype=torch.float32, device=out.device)

    def run() -> list[Any]:
        acc.zero_().index_add_(0, token, rows.index_select(0, slots).float() * weights)
        return [out.copy_(acc)]
    return _Op(run, {})


OPS: dict[str, Callable[[dict[str, Any], LaunchSpec, dict[str, Any]], _Op]] = {
    "matmul": _matmul, "sdpa": _sdpa, "conv2d": _conv2d, "index_select": _index_select, "index_add": _index_add,
}


# ---- tensors between NumPy and torch --------------------------------------------------------------

def _to_device(host: np.ndarray, dtype: str, device: Any) -> Any:
    import torch

    if dtype == "bf16":   # uint16 bit patterns -> bfloat16 of the same bits
        return torch.from_numpy(host.view(np.int16)).to(device).view(torch.bfloat16)
    return torch.from_numpy(host).to(device)


def _to_host(tensor: Any, dtype: str) -> np.ndarray:
    import torch

    tensor = tensor.detach().contiguous()
    if dtype == "bf16":
        return bf16_values(tensor.view(torch.int16).cpu().numpy().view(np.uint16))
    host: np.ndarray = tensor.cpu().numpy()
    return host.astype(HOST_DTYPES[dtype], copy=False)


# ---- one entry ----------------------------------------------------------------------------------

def _workspace(entry: BundleEntry, rng: np.random.Generator, device: CudaDevice, gpu: Any,
               placements: int) -> Workspace:
    """Copies of every tensor of the entry on the GPU (inputs with the same values, outputs poisoned);
    inputs made on the GPU where `device_inputs` can, else on the host (`make_input`), as the CUDA
    runner makes them; `memo["inputs"]` gives their host arrays to a check (`HostInputs`)."""
    import torch

    specs = {t.name: t for t in entry.tensors}
    maker = device_inputs(device.ordinal, rng)
    on_host: dict[str, np.ndarray] = {}
    first: dict[str, Any] = {}
    for name, spec in specs.items():
        if spec.role != "input":
            continue
        if maker is not None and maker.can_make(spec):
            made = maker.make(spec)
            first[name] = made.view(torch.bfloat16) if spec.dtype == "bf16" else made
        else:
            on_host[name] = make_input(spec, rng)
            first[name] = _to_device(on_host[name], spec.dtype, gpu)
    sets: list[dict[str, Any]] = []
    for copy in range(max(1, placements)):
        tensors = {name: t if copy == 0 else t.clone() for name, t in first.items()}
        for name, spec in specs.items():
            if spec.role == "output":   # poisoned: NaN in every float width
                out = torch.empty(spec.shape, dtype=_torch_dtype(spec.dtype), device=gpu)
                out.view(torch.uint8).fill_(0xFF)
                tensors[name] = out
        sets.append(tensors)
    workspace = Workspace(sets=sets, release=sets.clear)

    def download(name: str) -> np.ndarray:   # as the device stores it: bf16 as uint16 bit patterns
        tensor = sets[0][name].detach().contiguous()
        if specs[name].dtype == "bf16":
            bits: np.ndarray = tensor.view(torch.int16).cpu().numpy()
            return bits.view(np.uint16)
        host: np.ndarray = tensor.cpu().numpy()
        return host

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
    """Bind the operator to fresh inputs, run it once into poisoned outputs and check: a CheckedKernel,
    a `wrong` CaseResult, or `skipped` where torch with CUDA is missing. Raises on errors. The
    operator is bound, and captured in a graph, on every buffer copy of the workspace (the runners'
    shared keyword arguments: `pipeline.agents.runners`)."""
    launch = entry.launch
    assert launch is not None and launch.torch is not None and entry.reference is not None
    if (missing := torch_missing()) is not None:
        return CaseResult(case=entry.case, target=entry.target, status="skipped", reason=missing)
    import torch

    if launch.torch.op not in OPS:
        raise ValueError(f"the torch runner has no operator {launch.torch.op}")
    gpu = torch.device("cuda", device.ordinal)
    stream = torch.cuda.ExternalStream(device.stream_handle, device=gpu)
    specs = {t.name: t for t in entry.tensors}
    own = workspace is None
    with torch.cuda.device(gpu), torch.cuda.stream(stream):
        if workspace is None:
            workspace = _workspace(entry, rng, device, gpu, placements)
        ops = []
        for tensors in workspace.sets:
            params = {**launch.torch.params, CHOICE: workspace.memo.get(CHOICE)}
            ops.append(OPS[launch.torch.op](tensors, launch, params))
            workspace.memo.setdefault(CHOICE, ops[-1].environment)
        correctness = verified
        if correctness is None:
            workspace.memo["inputs"].fetch(launch.arguments)   # before the launch: what the operator was given
            for name, spec in specs.items():
                if spec.role == "output":
                    workspace.sets[0][name].view(torch.uint8).fill_(0xFF)
            results = ops[0].run()
            stream.synchronize()
            got = [_to_host(r, specs[name].dtype) for r, name in zip(results, launch.results)]
    ws = workspace
    if correctness is None:
        inputs = ws.memo["inputs"]
        correctness = finite(check_against_reference(
            got, [reference_view(specs[name], inputs[name]) for name in launch.arguments], reference_fn,
            launch.results, entry.reference, rng,
            memo=ws.memo))
    if not correctness.passed:
        if own:
            ws.release()
        return CaseResult(case=entry.case, target=entry.target, status="wrong",
                          reason=f"correctness check failed: {correctness.detail}", correctness=correctness)
    captured = [_capture(op, gpu) for op in ops]
    graphs = [graph for graph, _ in captured]
    why_eager = next((why for graph, why in captured if graph is None), "")
    environment = {**device.notes, "torch": torch.__version__, **ops[0].environment,
                   "timing": "cuda graph replay" if not why_eager else f"eager ({why_eager})"}

    def release() -> None:
        for graph in graphs:
            if graph is not None:
                graph.reset()
        graphs.clear()
        if own:
            ws.release()

    checked = CheckedKernel(entry=entry, correctness=correctness, run_once=lambda: 0.0, environment=environment,
                            release=release, default_clock_mhz=device.default_clock_mhz, workspace=ws)

    def launch_op() -> None:
        with torch.cuda.device(gpu), torch.cuda.stream(stream):
            graph = graphs[ws.current]
            if graph is not None:
                graph.replay()
            else:
                ops[ws.current].run()

    def run_once() -> float:
        # an eager operator may allocate or synchronise (it would wait on the gate forever): ungated
        seconds = device.time_once(launch_op, gated=graphs[ws.current] is not None)
        device.record_reading(checked)
        return seconds

    checked.run_once = run_once
    return checked


def _capture(op: _Op, gpu: Any) -> tuple[Any | None, str]:
    """The operator captured in a CUDA graph (after warm-up calls on a side stream, as PyTorch's graph
    docs ask), or None and why capture failed. Capture is thread-local, so other threads' CUDA calls
    cannot invalidate it."""
    import torch

    try:
        with torch.cuda.device(gpu):
            side = torch.cuda.Stream(device=gpu)
            side.wait_stream(torch.cuda.current_stream(gpu))
            with torch.cuda.stream(side):
                for _ in range(GRAPH_WARMUP_CALLS):
                    op.run()
            torch.cuda.current_stream(gpu).wait_stream(side)
            torch.cuda.synchronize(gpu)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                op.run()
            torch.cuda.synchronize(gpu)
            graph.replay()
            torch.cuda.synchronize(gpu)
        return graph, ""
    except Exception as exc:   # e.g. an operator that synchronizes or allocates on the host while captured
        try:
            torch.cuda.synchronize(gpu)
        except Exception:
            pass
        return None, f"graph capture failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


def _torch_dtype(dtype: str) -> Any:
    import torch

    return {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
            "i64": torch.int64, "i32": torch.int32, "i8": torch.int8}[dtype]
