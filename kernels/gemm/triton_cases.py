"""GEMM in Triton for `cuda:sm_90`: C[M, N] = A[M, K] @ B[K, N], bf16 in, fp32 accumulate, bf16 out.

Read top to bottom: the shapes (named by the model they come from), the per-shape tile table, the
kernel (`gemm/triton_kernel.py`, a file of its own because it imports triton and only the
builder's compile worker loads it), its launch, its reference check, its FLOP/byte counts, and
the case list. This module imports no compiler.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from pipeline.build.suite_api import KernelCase, Pointer, Scalar, TritonSource
from pipeline.contracts.ids import CaseId, Target
from pipeline.contracts.manifest import ReferenceSpec, ReferenceSubset, TensorSpec


@dataclass(frozen=True)
class Shape:
    name: str       # case name: the model layer the shape comes from
    model: str
    m: int
    n: int
    k: int

    @property
    def label(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


# Projections as C = X @ W with X[tokens, in] and W[in, out]. M is tokens: 4096 for a prefill
# chunk, 1 and 16 for decode. Llama-3-8B: hidden 4096, 32 query + 8 KV heads of 128 (fused QKV
# out = 4096 + 2 * 1024 = 6144), MLP 14336. Qwen3-8B has the same hidden size and head layout
# (its QKV and O projections are Llama's shapes), so only its MLP (12288) is listed.
_PROJECTIONS = (
    ("llama3-8b-qkv-proj", "Llama-3-8B", 6144, 4096),
    ("llama3-8b-o-proj", "Llama-3-8B", 4096, 4096),
    ("llama3-8b-mlp-up", "Llama-3-8B", 14336, 4096),
    ("llama3-8b-mlp-down", "Llama-3-8B", 4096, 14336),
    ("qwen3-8b-mlp-up", "Qwen3-8B", 12288, 4096),
    ("qwen3-8b-mlp-down", "Qwen3-8B", 4096, 12288),
)
_PHASES = (("prefill", 4096), ("decode", 16), ("decode", 1))

SHAPES: tuple[Shape, ...] = (
    *(Shape(f"{name}-{phase}", model, m, n, k) for name, model, n, k in _PROJECTIONS for phase, m in _PHASES),
    Shape("square-4096", "square", 4096, 4096, 4096),
    Shape("square-8192", "square", 8192, 8192, 8192),
    Shape("square-256", "calibration", 256, 256, 256),     # small: the GPU tests' case
)


@dataclass(frozen=True)
class Tile:
    """One launch configuration of the kernel: tile sizes, grouping, warps and pipeline depth."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3


# Large M (prefill, squares): the tutorial's best Hopper config, 128x256 tiles, 8 warps (two
# warpgroups of wgmma), 3 stages = 144 KiB of shared memory. Decode (M = 1 or 16): the smallest
# M tile tl.dot takes (16), narrow N tiles so that N / BLOCK_N programs still fill 132 SMs, long K
# steps to keep the weight stream busy.
_PREFILL = Tile(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3)
_DECODE = Tile(block_m=16, block_n=32, block_k=256, group_m=1, num_warps=4, num_stages=4)
_SMALL = Tile(block_m=64, block_n=64, block_k=64, group_m=8, num_warps=4, num_stages=3)

# One entry per shape label (MxNxK); every shape in SHAPES has one.
TILES: dict[str, Tile] = {
    **{f"4096x{n}x{k}": _PREFILL for _, _, n, k in _PROJECTIONS},
    **{f"{m}x{n}x{k}": _DECODE for _, _, n, k in _PROJECTIONS for m in (1, 16)},
    "4096x4096x4096": _PREFILL,
    "8192x8192x8192": _PREFILL,
    "256x256x256": _SMALL,
}


def is_cuda(target: Target) -> bool:
    return target.backend == "cuda"


# ---- the kernel and its launch -------------------------------------------------------------------

KERNEL_MODULE = "gemm.triton_kernel"
KERNEL = "matmul_kernel"


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def grid(shape: Shape, tile: Tile) -> tuple[int]:
    """One program per BLOCK_M x BLOCK_N tile of C, on a 1-D grid (the kernel groups them)."""
    return (cdiv(shape.m, tile.block_m) * cdiv(shape.n, tile.block_n),)


def make_source(shape: Shape, target: Target) -> TritonSource:
    tile = TILES[shape.label]
    m, n, k = shape.m, shape.n, shape.k
    return TritonSource(
        module=KERNEL_MODULE,
        function=KERNEL,
        args={
            # pointers: row-major A[M, K], B[K, N], C[M, N]
            "a_ptr": Pointer("a", "bf16"), "b_ptr": Pointer("b", "bf16"), "c_ptr": Pointer("c", "bf16"),
            # sizes
            "M": Scalar(m), "N": Scalar(n), "K": Scalar(k),
            # strides
            "stride_am": Scalar(k), "stride_ak": Scalar(1),
            "stride_bk": Scalar(n), "stride_bn": Scalar(1),
            "stride_cm": Scalar(n), "stride_cn": Scalar(1),
        },
        constexprs={"BLOCK_M": tile.block_m, "BLOCK_N": tile.block_n, "BLOCK_K": tile.block_k, "GROUP_M": tile.group_m},
        grid=grid(shape, tile),
        num_warps=tile.num_warps,
        num_stages=tile.num_stages,
    )


# ---- reference, roofline -----------------------------------------------------------------------

def tensors(shape: Shape) -> tuple[TensorSpec, ...]:
    return (
        TensorSpec(name="a", role="input", shape=[shape.m, shape.k], dtype="bf16", init="normal"),
        TensorSpec(name="b", role="input", shape=[shape.k, shape.n], dtype="bf16", init="normal"),
        TensorSpec(name="c", role="output", shape=[shape.m, shape.n], dtype="bf16", init="none"),
    )


# Rows of C compared with the float64 reference: a random subset of REFERENCE_ROWS rows (every column
# of them) for prefill shapes, whose full float64 product costs seconds on the agent's host; all of C
# is still checked to be written.
REFERENCE_ROWS = 256


def reference(shape: Shape) -> ReferenceSpec:
    # The reference gets the bf16 inputs exactly (as float32 arrays holding bf16 values) and
    # computes in float64, so the kernel's error is its fp32 accumulation (~sqrt(K) * 2^-24 * |c|,
    # negligible) plus rounding C to bf16 (at most 2^-8 * |c|). rtol = 1e-2 leaves a 2.5x margin;
    # one product missing or doubled moves an element by O(1), far outside atol + rtol * |c|.
    subset = ReferenceSubset(axis=0, count=REFERENCE_ROWS) if shape.m > REFERENCE_ROWS else None
    return ReferenceSpec(module="gemm.reference", function="matmul", atol=1e-2, rtol=1e-2, subset=subset)


def flops(shape: Shape) -> int:
    return 2 * shape.m * shape.n * shape.k


def bytes_moved(shape: Shape) -> int:
    return 2 * (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n)


def case(shape: Shape) -> KernelCase:
    return KernelCase(
        case_id=CaseId(family="gemm", name=shape.name, shape=shape.label, dtype="bf16", impl="triton"),
        model=shape.model,
        targets=("cuda:sm_90",),
        tensors=tensors(shape),
        arguments=("a", "b"),
        results=("c",),
        reference=reference(shape),
        flops=flops(shape),
        bytes=bytes_moved(shape),
        make_source=partial(make_source, shape),
        source_files=("gemm/triton_cases.py", "gemm/triton_kernel.py", "gemm/reference.py"),
    )


def cases() -> list[KernelCase]:
    return [case(shape) for shape in SHAPES]
