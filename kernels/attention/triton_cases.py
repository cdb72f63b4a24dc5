"""Flash attention forward in Triton: bf16 in/out, fp32 accumulate, causal prefill and split-K decode,
grouped-query attention; for `cuda:sm_90` (run) and `hip:gfx942|gfx950|gfx1250` (build-only).

Read top to bottom: the shapes (named by the model they come from), the one tile table, the kernels
(`attention/triton_kernel.py`, a file of its own because it imports triton), their launch, the
reference check, the FLOP/byte counts, and the case list. This module imports no compiler.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from math import sqrt

from pipeline.build.suite_api import KernelCase, Pointer, Scalar, TritonSource
from pipeline.contracts.ids import CaseId, Target
from pipeline.contracts.manifest import ReferenceSpec, ReferenceSubset, TensorSpec


@dataclass(frozen=True)
class Shape:
    name: str        # case name: model and phase
    model: str
    h_q: int         # query heads
    h_kv: int        # key/value heads (GQA: h_q is a multiple)
    head_dim: int
    n_q: int         # query tokens (1 for decode)
    n_kv: int        # key/value tokens (the prompt, or the KV cache)
    batch: int = 1

    @property
    def causal(self) -> bool:
        return self.n_q > 1    # prefill is causal; decode's one token sees the whole cache

    @property
    def label(self) -> str:
        return f"B{self.batch}-Sq{self.n_q}-Skv{self.n_kv}-Hq{self.h_q}-Hkv{self.h_kv}-D{self.head_dim}"


# (name, model, query heads, KV heads, head dim), from the models' configs:
# Llama-3-8B 32/8/128; Qwen3-14B 40/8/128 (a group of 5: GQA beyond powers of two; Qwen3-8B is
# 32/8/128, Llama-3-8B's layout); Llama-3.2-1B 32/8/64 (hidden 2048 / 32 heads).
_MODELS = (
    ("llama3-8b", "Llama-3-8B", 32, 8, 128),
    ("qwen3-14b", "Qwen3-14B", 40, 8, 128),
    ("llama3.2-1b", "Llama-3.2-1B", 32, 8, 64),
)
_PREFILL_TOKENS = (512, 2048, 8192, 16384)
_DECODE_CACHE = (2048, 8192, 16384)

SHAPES: tuple[Shape, ...] = (
    *(Shape(f"{name}-prefill", model, hq, hkv, d, n, n) for name, model, hq, hkv, d in _MODELS
      for n in _PREFILL_TOKENS),
    *(Shape(f"{name}-decode", model, hq, hkv, d, 1, n) for name, model, hq, hkv, d in _MODELS
      for n in _DECODE_CACHE),
    Shape("small-prefill", "test", 4, 2, 64, 256, 256),      # small: the GPU tests' cases
    Shape("small-decode", "test", 4, 2, 64, 1, 512),
)


@dataclass(frozen=True)
class Tile:
    """Prefill: BLOCK_M query rows x BLOCK_N keys per step. Decode: BLOCK_N keys per step over CHUNK
    keys per program (CHUNK = 0: chosen from the cache length, see `decode_chunk`)."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


def is_gfx1250(target: Target) -> bool:
    """gfx1250 is a wave32 (RDNA-like) part with 320 KiB of LDS: its own tiles; Triton 3.9 compiles
    it with 32-wide waves whatever GPUTarget asks (see triton_compiler.warp_size)."""
    return target.backend == "hip" and target.arch == "gfx1250"


def platform(target: Target) -> str:
    """Which column of TILES a target reads: Hopper, CDNA (gfx942/gfx950: wave64, 64-160 KiB LDS), gfx1250."""
    if target.backend == "cuda":
        return "hopper"
    return "gfx1250" if is_gfx1250(target) else "cdna"


DECODE_BLOCK_N = 64    # every decode tile's key step: the split count (and workspace) depends on it alone

# One entry per (phase, head dim, platform). Hopper prefill: 128-row query blocks over two warpgroups
# (wgmma), K/V triple buffered; head dim 128 measured on an H200 (8k causal, Triton 3.6 JIT): 128x128
# w8 s3 507 TFLOP/s, 128x64 w8 s3 496, 64x64 w4 481, 128x64 w4 351 (SDPA 606). BLOCK_M % BLOCK_N == 0. CDNA: 64 KiB of LDS on gfx942, so two stages of 64-key K/V
# blocks. Decode: BLOCK_M is the packed query-head group (16 rows, tl.dot's minimum).
TILES: dict[tuple[str, int, str], Tile] = {
    ("prefill", 128, "hopper"): Tile(block_m=128, block_n=128, num_warps=8, num_stages=3),
    ("prefill", 64, "hopper"): Tile(block_m=128, block_n=64, num_warps=4, num_stages=3),
    ("prefill", 128, "cdna"): Tile(block_m=128, block_n=64, num_warps=4, num_stages=2),
    ("prefill", 64, "cdna"): Tile(block_m=128, block_n=64, num_warps=4, num_stages=2),
    ("prefill", 128, "gfx1250"): Tile(block_m=128, block_n=64, num_warps=8, num_stages=2),
    ("prefill", 64, "gfx1250"): Tile(block_m=128, block_n=64, num_warps=8, num_stages=2),
    **{("decode", d, p): Tile(block_m=16, block_n=DECODE_BLOCK_N, num_warps=4, num_stages=2)
       for d in (64, 128) for p in ("hopper", "cdna", "gfx1250")},
}


# ---- the kernels and their launch --------------------------------------------------------------

KERNEL_MODULE = "attention.triton_kernel"
DECODE_TARGET_PROGRAMS = 512     # split the cache until about this many programs run (4 per SM on H100)
MIN_CHUNK = 128


def is_decode(shape: Shape) -> bool:
    return shape.n_q == 1


def decode_chunk(shape: Shape) -> int:
    """Keys per decode program: enough splits for ~DECODE_TARGET_PROGRAMS programs, a multiple of
    DECODE_BLOCK_N, at least MIN_CHUNK, and dividing the cache length."""
    heads = shape.batch * shape.h_kv
    chunk = max(MIN_CHUNK, shape.n_kv * heads // DECODE_TARGET_PROGRAMS)
    chunk -= chunk % DECODE_BLOCK_N
    while shape.n_kv % chunk:
        chunk -= DECODE_BLOCK_N
    return chunk


def grid(shape: Shape, tile: Tile) -> tuple[int, int]:
    """Prefill: (batch x query heads, query blocks). Decode: (splits, batch x KV heads)."""
    if is_decode(shape):
        return (shape.n_kv // decode_chunk(shape), shape.batch * shape.h_kv)
    return (shape.batch * shape.h_q, shape.n_q // tile.block_m)


def make_source(shape: Shape, target: Target) -> TritonSource:
    phase = "decode" if is_decode(shape) else "prefill"
    tile = TILES[(phase, shape.head_dim, platform(target))]
    sizes = {"H_Q": Scalar(shape.h_q), "H_KV": Scalar(shape.h_kv)}
    pointers = {"q_ptr": Pointer("q", "bf16"), "k_ptr": Pointer("k", "bf16"), "v_ptr": Pointer("v", "bf16"),
                "o_ptr": Pointer("o", "bf16")}
    scale = {"sm_scale": Scalar(1.0 / sqrt(shape.head_dim), "fp32")}
    if is_decode(shape):
        group = shape.h_q // shape.h_kv
        chunk = decode_chunk(shape)
        return TritonSource(
            module=KERNEL_MODULE, function="attn_decode_kernel",
            args={**pointers, "part_ml_ptr": Pointer("part_ml", "fp32"), "part_acc_ptr": Pointer("part_acc", "fp32"),
                  "sem_ptr": Pointer("semaphore", "i32"), **sizes, "N_KV": Scalar(shape.n_kv), **scale},
            constexprs={"HEAD_DIM": shape.head_dim, "GROUP": group, "BLOCK_H": max(tile.block_m, group),
                        "BLOCK_N": tile.block_n, "NUM_SPLITS": shape.n_kv // chunk, "CHUNK": chunk},
            grid=grid(shape, tile), num_warps=tile.num_warps, num_stages=tile.num_stages,
        )
    return TritonSource(
        module=KERNEL_MODULE, function="attn_fwd_kernel",
        args={**pointers, **sizes, "N_Q": Scalar(shape.n_q), "N_KV": Scalar(shape.n_kv), **scale},
        constexprs={"HEAD_DIM": shape.head_dim, "BLOCK_M": tile.block_m, "BLOCK_N": tile.block_n,
                    "CAUSAL": shape.causal},
        grid=grid(shape, tile), num_warps=tile.num_warps, num_stages=tile.num_stages,
    )


# ---- reference, roofline -----------------------------------------------------------------------

def tensors(shape: Shape) -> tuple[TensorSpec, ...]:
    """Q, K, V and O; the vendor control (SDPA) takes the same four."""
    b, d = shape.batch, shape.head_dim
    return (
        TensorSpec(name="q", role="input", shape=[b, shape.h_q, shape.n_q, d], dtype="bf16"),
        TensorSpec(name="k", role="input", shape=[b, shape.h_kv, shape.n_kv, d], dtype="bf16"),
        TensorSpec(name="v", role="input", shape=[b, shape.h_kv, shape.n_kv, d], dtype="bf16"),
        TensorSpec(name="o", role="output", shape=[b, shape.h_q, shape.n_q, d], dtype="bf16", init="none"),
    )


def workspace(shape: Shape) -> tuple[TensorSpec, ...]:
    """Split-K decode's scratch: per (head, split) partials, poisoned like any output (every one is
    written before it is read), and one semaphore per KV head, which must start at zero (drawn from
    randint [0, 1)) and which the kernel leaves at zero."""
    splits = shape.n_kv // decode_chunk(shape)
    heads = shape.batch * shape.h_q
    return (
        TensorSpec(name="part_ml", role="output", shape=[heads * splits * 2], dtype="f32", init="none"),
        TensorSpec(name="part_acc", role="output", shape=[heads * splits * shape.head_dim], dtype="f32", init="none"),
        TensorSpec(name="semaphore", role="input", shape=[shape.batch * shape.h_kv], dtype="i32", init="randint",
                   low=0, high=1),
    )


# Queries compared with the float64 reference: a random subset of rows (the reference's cost is
# rows x keys x heads; all 16k rows of a 16k prefill would be ~1e13 operations on the agent's CPU).
# Every element of O is still checked to be written (the runner's NaN poison).
REFERENCE_ROWS = 64


def reference(shape: Shape) -> ReferenceSpec:
    # bf16 inputs exactly, float64 math. The kernel rounds P to bf16 before P @ V (relative 2^-9) and
    # O to bf16 (2^-9 of |o| <= max |v|): atol = rtol = 1e-2 is a >2x margin; a dropped key block or a
    # wrong KV head moves O by O(0.1..1).
    function = "causal_attention" if shape.causal else "attention"
    subset = ReferenceSubset(axis=2, count=REFERENCE_ROWS) if shape.n_q > REFERENCE_ROWS else None
    return ReferenceSpec(module="attention.reference", function=function, atol=1e-2, rtol=1e-2, subset=subset)


def flops(shape: Shape) -> int:
    """Q K^T and P V, 2 flops per multiply-add each; causal does half (the FlashAttention convention)."""
    full = 4 * shape.batch * shape.h_q * shape.n_q * shape.n_kv * shape.head_dim
    return full // 2 if shape.causal else full


def bytes_moved(shape: Shape) -> int:
    """Q and O once, K and V once (GQA: each KV head read once, not once per query head)."""
    return 2 * shape.batch * shape.head_dim * (2 * shape.h_q * shape.n_q + 2 * shape.h_kv * shape.n_kv)


TARGETS = ("cuda:sm_90", "hip:gfx942", "hip:gfx950", "hip:gfx1250")


def case(shape: Shape) -> KernelCase:
    return KernelCase(
        case_id=CaseId(family="attention", name=shape.name, shape=shape.label, dtype="bf16", impl="triton"),
        model=shape.model,
        targets=TARGETS,
        tensors=tensors(shape) + (workspace(shape) if is_decode(shape) else ()),
        arguments=("q", "k", "v"),
        results=("o",),
        reference=reference(shape),
        flops=flops(shape),
        bytes=bytes_moved(shape),
        make_source=partial(make_source, shape),
        source_files=("attention/triton_cases.py", "attention/triton_kernel.py", "attention/reference.py"),
    )


def cases() -> list[KernelCase]:
    return [case(shape) for shape in SHAPES]
