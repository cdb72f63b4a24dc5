"""Host-side cost of a GPU job's check phase, per case of a built CUDA bundle: making the inputs
(`cuda_runner.make_inputs`, as the CUDA and torch runners do), the reference's float32 views of bf16
inputs (`cuda_runner.reference_view`, made only when a check runs) and the float64 reference on its
subset; the baseline is the earlier way of drawing bf16 inputs (float32 normals or uniforms rounded
to bf16, float32 views made with them), timed in the same run on the same host.

    .venv/bin/python bench/gpu_acceptance.py build --out .gpu/acc      # the suite for cuda:sm_90
    .venv/bin/python bench/check_inputs.py --bundle .gpu/acc/base [--top 10]

No GPU needed: this is the part of the check that runs on the agent's CPU.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.agents.local import _References  # noqa: E402
from pipeline.agents.runners.checking import subset_index  # noqa: E402
from pipeline.agents.runners.cuda_runner import HOST_DTYPES, make_inputs, reference_view  # noqa: E402
from pipeline.agents.runners.inputs import bf16_bits, bf16_values, random_values  # noqa: E402
from pipeline.contracts import BundleManifest, TensorSpec  # noqa: E402


def baseline_inputs(tensors: list[TensorSpec], rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The inputs as drawn before the bf16 quantile table: float32 draws rounded to bf16, each with
    the reference's float32 view made at once."""
    arrays = {}
    for spec in tensors:
        if spec.role != "input":
            continue
        values = random_values(spec, rng, normal_dtype=np.float32)
        if spec.dtype == "bf16":
            bits = bf16_bits(values.astype(np.float32))
            arrays[spec.name] = (bits, bf16_values(bits))
        else:
            host = np.ascontiguousarray(values.astype(HOST_DTYPES[spec.dtype]))
            arrays[spec.name] = (host, host)
    return arrays


T = TypeVar("T")


def _timed(fn: Callable[..., T], *args: Any, **kw: Any) -> tuple[float, T]:
    start = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True, help="a built bundle, or a folder holding one")
    parser.add_argument("--top", type=int, default=10, help="cases to list, the costliest first")
    args = parser.parse_args()
    bundle = args.bundle if (args.bundle / "manifest.json").exists() else next(args.bundle.iterdir())
    manifest = BundleManifest.model_validate_json((bundle / "manifest.json").read_text())
    references = _References(bundle / manifest.suite_source)
    rows = []
    for entry in manifest.entries:
        if entry.reference is None or entry.launch is None and not entry.tensors:
            continue
        base_s, _ = _timed(baseline_inputs, entry.tensors, np.random.default_rng(1))
        rng = np.random.default_rng(1)
        new_s, inputs = _timed(make_inputs, entry.tensors, rng)
        names = entry.launch.arguments if entry.launch else [t.name for t in entry.tensors if t.role == "input"]
        fn = references.get(entry.reference.module, entry.reference.function)
        subset = entry.reference.subset
        first_output = next(t for t in entry.tensors if t.role == "output")
        kwargs = {} if subset is None else {"index": subset_index(first_output.shape[subset.axis], subset.count, rng)}
        specs = {t.name: t for t in entry.tensors}
        view_s, arguments = _timed(lambda: [reference_view(specs[n], inputs[n]) for n in names])  # noqa: B023
        ref_s, _ = _timed(fn, *arguments, **kwargs)
        rows.append((base_s, new_s, ref_s, view_s, str(entry.case)))
    base, new, ref, view = (sum(r[:4][i] for r in rows) for i in range(4))
    print(f"{platform.node()} ({platform.processor() or platform.machine()}), {len(rows)} entries of {bundle.name}")
    print(f"inputs, baseline (float32 draws rounded to bf16): {base:7.1f} s")
    print(f"inputs, now (bf16 quantile table, bit patterns):  {new:7.1f} s  ({base / new:.1f}x faster)")
    print(f"reference views of bf16 inputs (float32):         {view:7.1f} s  (only where a check runs)")
    print(f"references (float64, on their subsets):           {ref:7.1f} s")
    print(f"check phase on the host: {base + ref:.1f} s -> {new + view + ref:.1f} s; "
          f"checks cached: {base:.1f} s -> {new:.1f} s")
    print("costliest cases (baseline inputs, now, reference view, reference; seconds):")
    for r in sorted(rows, key=lambda r: -(r[0] + r[2]))[:args.top]:
        print(f"  {r[0]:6.2f} {r[1]:6.2f} {r[3]:6.2f} {r[2]:6.2f}  {r[4]}")


if __name__ == "__main__":
    main()
