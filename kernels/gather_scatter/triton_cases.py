"""Gather/scatter in Triton (`cuda:sm_90`; `hip:gfx942|gfx950|gfx1250` build-only) and in Gluon with
the AMD Tensor Data Mover (`hip:gfx1250`, build-only): MoE dispatch, MoE combine, embedding lookup,
and (TDM only) the MoE un-permute.
bf16 rows, int32 indices, fp32 router weights.

Read top to bottom: the shapes (named by model), the tiles, the kernels (`triton_kernel.py`,
`gluon_kernel.py`: files of their own, only the builder's compile worker imports them), their
launch, reference, FLOP/byte counts and the case list. This module imports no compiler.

- dispatch / embedding: out[r, :] = table[idx[r], :];
- combine: out[t, :] = sum_j w[t, j] * y[pos[t, j], :] (segmented sum: each token's K slots are
  one segment; `pos` is each slot's row in the expert-sorted buffer). The IREE combine takes the
  scatter form instead (destination token per row, added into the residual);
- unpermute (Gluon TDM async_scatter): out[pos[r], :] = y[r, :], expert-sorted rows back to
  token-slot order, `pos` a permutation (every output row written once).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Literal

from pipeline.build.suite_api import KernelCase, Pointer, Scalar, TritonSource
from pipeline.contracts.ids import CaseId, Target
from pipeline.contracts.manifest import ReferenceSpec, TensorSpec

Op = Literal["dispatch", "combine", "embedding", "unpermute"]


@dataclass(frozen=True)
class Shape:
    name: str
    model: str
    op: Op
    source_rows: int    # dispatch, combine: tokens; embedding: vocabulary
    rows: int           # rows moved (dispatch, unpermute: tokens * top-k; embedding: tokens looked up)
    hidden: int
    top_k: int = 1

    @property
    def label(self) -> str:
        return f"{self.source_rows}x{self.rows}x{self.hidden}"


def moe(name: str, model: str, tokens: int, top_k: int, hidden: int) -> tuple[Shape, Shape]:
    return (Shape(f"{name}-moe-dispatch", model, "dispatch", tokens, tokens * top_k, hidden, top_k),
            Shape(f"{name}-moe-combine", model, "combine", tokens, tokens * top_k, hidden, top_k))


# Mixtral-8x7B (hidden 4096, top-2 of 8), Qwen3-30B-A3B (2048, top-8 of 128), DeepSeek-V3 (7168,
# top-8 of 256): a 4096-token prefill batch and a 64-token decode batch; Llama-3-8B's embedding
# (128256 x 4096) for a 4096-token prefill and a 64-token decode step.
SHAPES: tuple[Shape, ...] = (
    *(s for tokens in (4096, 64) for s in moe("mixtral-8x7b", "Mixtral-8x7B", tokens, 2, 4096)),
    *(s for tokens in (4096, 64) for s in moe("qwen3-30b-a3b", "Qwen3-30B-A3B", tokens, 8, 2048)),
    *(s for tokens in (4096, 64) for s in moe("deepseek-v3", "DeepSeek-V3", tokens, 8, 7168)),
    Shape("llama3-8b-embedding", "Llama-3-8B", "embedding", 128256, 4096, 4096),
    Shape("llama3-8b-embedding", "Llama-3-8B", "embedding", 128256, 64, 4096),
)
# Gluon TDM (gfx1250): the row gathers (dispatch, embedding) through async_gather, and the MoE
# un-permute (the expert outputs' rows written back to token-slot order, ahead of the weighted sum)
# through async_scatter, on the MoE shapes.
TDM_SHAPES: tuple[Shape, ...] = tuple(s for s in SHAPES if s.op != "combine")
TDM_SCATTER_SHAPES: tuple[Shape, ...] = tuple(
    Shape(s.name.replace("-moe-combine", "-moe-unpermute"), s.model, "unpermute", s.source_rows, s.rows, s.hidden, s.top_k)
    for s in SHAPES if s.op == "combine")

TRITON_TARGETS = ("cuda:sm_90", "hip:gfx942", "hip:gfx950", "hip:gfx1250")
TDM_TARGETS = ("hip:gfx1250",)


@dataclass(frozen=True)
class Tile:
    block_r: int        # rows (tokens for combine) per program
    block_c: int        # columns per program
    num_warps: int = 4


# A program moves 16 rows x 512 bf16 columns (16 KiB): enough bytes in flight per SM; combine
# reads K rows per output row, so it takes 4 tokens at a time. TDM: 8 rows per gather instruction
# with int32 indices, 16 rows = two instructions, 128 columns (4 KiB of LDS per block).
GATHER_TILE = Tile(block_r=16, block_c=512)
COMBINE_TILE = Tile(block_r=4, block_c=512)
TDM_TILE = Tile(block_r=16, block_c=128)


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


# ---- the kernels and their launch -----------------------------------------------------------------

def gather_source(s: Shape, target: Target) -> TritonSource:
    t = GATHER_TILE
    return TritonSource(
        module="gather_scatter.triton_kernel", function="gather_rows_kernel",
        args={
            "src_ptr": Pointer("table", "bf16"), "idx_ptr": Pointer("idx", "i32"), "out_ptr": Pointer("out", "bf16"),
            "ROWS": Scalar(s.rows), "COLS": Scalar(s.hidden),
        },
        constexprs={"BLOCK_R": t.block_r, "BLOCK_C": t.block_c},
        grid=(cdiv(s.rows, t.block_r), cdiv(s.hidden, t.block_c)), num_warps=t.num_warps, num_stages=1,
    )


def combine_source(s: Shape, target: Target) -> TritonSource:
    t = COMBINE_TILE
    return TritonSource(
        module="gather_scatter.triton_kernel", function="combine_rows_kernel",
        args={
            "y_ptr": Pointer("y", "bf16"), "pos_ptr": Pointer("pos", "i32"), "w_ptr": Pointer("w", "fp32"),
            "out_ptr": Pointer("out", "bf16"),
            "TOKENS": Scalar(s.source_rows), "COLS": Scalar(s.hidden),
        },
        constexprs={"TOP_K": s.top_k, "BLOCK_T": t.block_r, "BLOCK_C": t.block_c},
        grid=(cdiv(s.source_rows, t.block_r), cdiv(s.hidden, t.block_c)), num_warps=t.num_warps, num_stages=1,
    )


def tdm_gather_source(s: Shape, target: Target) -> TritonSource:
    t = TDM_TILE
    return TritonSource(
        module="gather_scatter.gluon_kernel", function="tdm_gather_rows_kernel",
        args={
            "src_ptr": Pointer("table", "bf16"), "idx_ptr": Pointer("idx", "i32"), "out_ptr": Pointer("out", "bf16"),
            "SRC_ROWS": Scalar(s.source_rows), "ROWS": Scalar(s.rows), "COLS": Scalar(s.hidden),
        },
        constexprs={"BLOCK_R": t.block_r, "BLOCK_C": t.block_c},
        grid=(cdiv(s.rows, t.block_r), cdiv(s.hidden, t.block_c)), num_warps=t.num_warps, num_stages=1,
    )


def tdm_scatter_source(s: Shape, target: Target) -> TritonSource:
    t = TDM_TILE
    if s.rows % t.block_r:   # a masked row would scatter to row 0: whole row blocks only
        raise ValueError(f"{s.name}: {s.rows} rows is not a multiple of the TDM block's {t.block_r}")
    return TritonSource(
        module="gather_scatter.gluon_kernel", function="tdm_scatter_rows_kernel",
        args={
            "y_ptr": Pointer("y", "bf16"), "pos_ptr": Pointer("pos", "i32"), "out_ptr": Pointer("out", "bf16"),
            "ROWS": Scalar(s.rows), "COLS": Scalar(s.hidden),
        },
        constexprs={"BLOCK_R": t.block_r, "BLOCK_C": t.block_c},
        grid=(cdiv(s.rows, t.block_r), cdiv(s.hidden, t.block_c)), num_warps=t.num_warps, num_stages=1,
    )


# ---- reference, roofline ------------------------------------------------------------------------

def tensors(s: Shape) -> tuple[TensorSpec, ...]:
    if s.op == "unpermute":   # pos: each sorted row's token slot, a permutation
        return (
            TensorSpec(name="y", role="input", shape=[s.rows, s.hidden], dtype="bf16", init="normal"),
            TensorSpec(name="pos", role="input", shape=[s.rows], dtype="i32", init="permutation", high=s.rows),
            TensorSpec(name="out", role="output", shape=[s.rows, s.hidden], dtype="bf16", init="none"),
        )
    if s.op == "combine":
        return (
            TensorSpec(name="y", role="input", shape=[s.rows, s.hidden], dtype="bf16", init="normal"),
            TensorSpec(name="pos", role="input", shape=[s.source_rows, s.top_k], dtype="i32", init="randint", low=0, high=s.rows),
            TensorSpec(name="w", role="input", shape=[s.source_rows, s.top_k], dtype="f32", init="uniform"),
            TensorSpec(name="out", role="output", shape=[s.source_rows, s.hidden], dtype="bf16", init="none"),
        )
    return (
        TensorSpec(name="table", role="input", shape=[s.source_rows, s.hidden], dtype="bf16", init="normal"),
        TensorSpec(name="idx", role="input", shape=[s.rows], dtype="i32", init="randint", low=0, high=s.source_rows),
        TensorSpec(name="out", role="output", shape=[s.rows, s.hidden], dtype="bf16", init="none"),
    )


def reference(s: Shape) -> ReferenceSpec:
    if s.op == "combine":
        # fp32 sum of K weighted bf16 rows, rounded to bf16 (2^-8 relative)
        return ReferenceSpec(module="gather_scatter.reference", function="combine_rows", atol=1e-2, rtol=1e-2)
    if s.op == "unpermute":
        return ReferenceSpec(module="gather_scatter.reference", function="scatter_rows", atol=0.0, rtol=0.0)
    return ReferenceSpec(module="gather_scatter.reference", function="gather_rows", atol=0.0, rtol=0.0)


def flops(s: Shape) -> int:
    return 2 * s.rows * s.hidden if s.op == "combine" else 0


def bytes_moved(s: Shape) -> int:
    if s.op == "combine":   # read K rows per token and the routing, write one row per token
        return 2 * s.rows * s.hidden + 8 * s.rows + 2 * s.source_rows * s.hidden
    return 4 * s.rows * s.hidden + 4 * s.rows   # dispatch, embedding, unpermute: rows read and written, index


ARGUMENTS: dict[str, tuple[str, ...]] = {
    "dispatch": ("table", "idx"), "embedding": ("table", "idx"), "combine": ("y", "pos", "w"), "unpermute": ("y", "pos"),
}


def case(s: Shape, impl: str, targets: tuple[str, ...], make_source, files: tuple[str, ...]) -> KernelCase:
    return KernelCase(
        case_id=CaseId(family="gather-scatter", name=s.name, shape=s.label, dtype="bf16", impl=impl),
        model=s.model,
        targets=targets,
        tensors=tensors(s),
        arguments=ARGUMENTS[s.op],
        results=("out",),
        reference=reference(s),
        flops=flops(s),
        bytes=bytes_moved(s),
        make_source=partial(make_source, s),
        source_files=("gather_scatter/triton_cases.py", *files, "gather_scatter/reference.py"),
    )


def cases() -> list[KernelCase]:
    triton, gluon = ("gather_scatter/triton_kernel.py",), ("gather_scatter/gluon_kernel.py",)
    return [
        *(case(s, "triton", TRITON_TARGETS, combine_source if s.op == "combine" else gather_source, triton)
          for s in SHAPES),
        *(case(s, "gluon-tdm", TDM_TARGETS, tdm_gather_source, gluon) for s in TDM_SHAPES),
        *(case(s, "gluon-tdm", TDM_TARGETS, tdm_scatter_source, gluon) for s in TDM_SCATTER_SHAPES),
    ]
