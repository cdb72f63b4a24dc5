"""NVBench's own figures for the suite's GEMMs (issue 5) and a small real NVBench JSON (issue 4).

Runs on a GPU host with NVBench's Python package `cuda-bench` (0.3.0, carried as a wheel), torch
and triton. Benchmarks, with NVBench's cold measurement (L2 flushed before every sample, a blocking
kernel holding the launches back, CUDA events) and its defaults unless the command line changes
them (stopping criterion stdrel: relative stdev <= 0.5 % after >= 0.5 s of GPU time and >= 10
samples, else a 15 s timeout):

- `triton_gemm_bf16`: the suite's Triton GEMM source (`kernels/gemm/triton_kernel.py`, loaded by
  path and JIT-compiled by the host's triton) with the suite's tile for the shape
  (`kernels/gemm/triton_cases.py` TILES: 128x256x64, GROUP_M 8, 8 warps, 3 stages for the large
  shapes; 64x64x64, 4 warps, 3 stages for 256^3). Shapes: 4096x4096x4096 (the measurement-quality
  `ctrl` case, the suite's square-4096) and 2048x2048x8192 (the g2..g10 cases' base);
- `torch_matmul_bf16`: torch.matmul bf16 (cuBLAS) at 4096^3, `out=` preallocated.

Inputs are bf16 normal(0, 1), seeded. `--set small` registers only 256x256x256 of both (the
small file shipped as test data); other arguments go to NVBench (`--json`, `--md`, `--timeout`,
`--min-samples`, ...).

    python3 bench/nvbench_reference.py --json nvbench.json --md nvbench.md
    python3 bench/nvbench_reference.py --set small --json nvbench_small.json --min-samples 10 --timeout 1
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
from cuda import bench

ROOT = Path(__file__).resolve().parents[1]
KERNEL_FILE = ROOT / "kernels" / "gemm" / "triton_kernel.py"

# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages): kernels/gemm/triton_cases.py TILES.
PREFILL = (128, 256, 64, 8, 8, 3)
SMALL = (64, 64, 64, 8, 4, 3)
TILES = {"4096x4096x4096": PREFILL, "2048x2048x8192": PREFILL, "256x256x256": SMALL}


def _kernel():
    spec = importlib.util.spec_from_file_location("suite_gemm_triton_kernel", KERNEL_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.matmul_kernel


def _shape(label: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in label.split("x"))
    return m, n, k


def _inputs(m: int, n: int, k: int, device: torch.device):
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn((m, k), generator=g, device=device, dtype=torch.float32).to(torch.bfloat16)
    b = torch.randn((k, n), generator=g, device=device, dtype=torch.float32).to(torch.bfloat16)
    c = torch.empty((m, n), device=device, dtype=torch.bfloat16)
    return a, b, c


def _torch_stream(state: bench.State, device: torch.device) -> torch.cuda.ExternalStream:
    cs = state.get_stream()
    return torch.cuda.ExternalStream(stream_ptr=cs.addressof(), device=device)


def _add_counts(state: bench.State, m: int, n: int, k: int) -> None:
    state.add_element_count(2 * m * n * k, "FLOP")
    state.add_global_memory_reads(2 * (m * k + k * n))
    state.add_global_memory_writes(2 * m * n)


def triton_gemm_bf16(state: bench.State) -> None:
    label = state.get_string("Shape")
    m, n, k = _shape(label)
    bm, bn, bk, gm, warps, stages = TILES[label]
    device = torch.device("cuda", state.get_device())
    torch.cuda.set_device(device)
    a, b, c = _inputs(m, n, k, device)
    kernel = _kernel()
    grid = (((m + bm - 1) // bm) * ((n + bn - 1) // bn),)

    def launch_on(stream: torch.cuda.Stream) -> None:
        with torch.cuda.stream(stream):
            kernel[grid](a, b, c, m, n, k, k, 1, n, 1, n, 1,
                         BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, num_warps=warps, num_stages=stages)

    launch_on(torch.cuda.current_stream(device))     # JIT-compile and check outside the timing
    torch.cuda.synchronize(device)
    if m * n * k <= 2048 ** 3:
        ref = (a.float() @ b.float())
        torch.testing.assert_close(c.float(), ref, atol=1e-1, rtol=2e-2)
    _add_counts(state, m, n, k)
    ts = _torch_stream(state, device)
    state.exec(lambda launch: launch_on(ts))


def torch_matmul_bf16(state: bench.State) -> None:
    m, n, k = _shape(state.get_string("Shape"))
    device = torch.device("cuda", state.get_device())
    torch.cuda.set_device(device)
    a, b, c = _inputs(m, n, k, device)
    ts = _torch_stream(state, device)

    def launch(_: bench.Launch) -> None:
        with torch.cuda.stream(ts):
            torch.matmul(a, b, out=c)

    launch(None)     # cuBLAS handle and workspace for this stream, outside the timing
    torch.cuda.synchronize(device)
    _add_counts(state, m, n, k)
    state.exec(launch)


def main() -> None:
    argv = list(sys.argv)
    small = False
    if "--set" in argv:
        i = argv.index("--set")
        small = argv[i + 1] == "small"
        del argv[i:i + 2]
    if small:
        bench.register(triton_gemm_bf16).add_string_axis("Shape", ["256x256x256"])
        bench.register(torch_matmul_bf16).add_string_axis("Shape", ["256x256x256"])
    else:
        bench.register(triton_gemm_bf16).add_string_axis("Shape", ["4096x4096x4096", "2048x2048x8192"])
        bench.register(torch_matmul_bf16).add_string_axis("Shape", ["4096x4096x4096"])
    bench.run_all_benchmarks(argv)


if __name__ == "__main__":
    main()
