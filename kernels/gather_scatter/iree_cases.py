"""Gather and scatter through IREE: MoE dispatch, MoE combine, embedding lookup. f32 on CPUs; f16
rows on GPUs (the combine accumulates in f32).

- dispatch and embedding, out[r, :] = table[idx[r], :]: a `linalg.generic` whose body reads the
  table with `tensor.extract` at the index (`iree_linalg_ext.gather` has no Vulkan lowering in 3.13:
  "failed to get lowering configuration"; this form compiles for every target);
- combine on CPUs, out = residual; out[token[r], :] += w[r] * y[r, :]: the weighting in a
  `linalg.generic`, then `iree_linalg_ext.scatter` (non-unique indices, add) into the residual stream;
- combine on GPUs, out[t, :] = sum_j w[t, j] * y[pos[t, j], :] (the Triton cases' segmented sum, `pos`
  a permutation: each expert-sorted row belongs to one slot): a reduction `linalg.generic` reading y
  with `tensor.extract`. The scatter form does not build for GPUs in 3.13: its dispatch keeps the
  whole output in shared memory (64 MiB for 8192x2048 f32 on valhall: "uses 67108864 bytes of shared
  memory; exceeded the limit"; hip and cuda fail the same dispatch's translation).
Read top to bottom: the shapes (named by model), the kernels, reference, FLOP/byte counts, cases.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Literal

from pipeline.build.suite_api import IreeSource, KernelCase
from pipeline.contracts.ids import CaseId, Target
from pipeline.contracts.manifest import ReferenceSpec, TensorSpec

from ..iree_targets import CPU, F16, F32, GPU

Op = Literal["dispatch", "combine", "embedding"]


@dataclass(frozen=True)
class Shape:
    name: str       # case name: model and operation
    model: str
    op: Op
    source_rows: int    # dispatch: tokens; combine: tokens (output rows); embedding: vocabulary
    rows: int           # rows moved: tokens * top-k (dispatch, combine) or tokens looked up
    hidden: int
    top_k: int = 1

    @property
    def label(self) -> str:   # source rows x moved rows x hidden
        return f"{self.source_rows}x{self.rows}x{self.hidden}"


def moe(name: str, model: str, tokens: int, top_k: int, hidden: int) -> tuple[Shape, Shape]:
    return (Shape(f"{name}-moe-dispatch", model, "dispatch", tokens, tokens * top_k, hidden, top_k),
            Shape(f"{name}-moe-combine", model, "combine", tokens, tokens * top_k, hidden, top_k))


# MoE: Mixtral-8x7B (hidden 4096, top-2 of 8 experts), Qwen3-30B-A3B (hidden 2048, top-8 of 128),
# DeepSeek-V3 (hidden 7168, top-8 of 256 routed experts). Embeddings: BERT-base (30522 x 768, the
# CPU's), Llama-3-8B (128256 x 4096). CPUs: 64 / 32 tokens in flight (1-2 MiB moved per call).
CPU_SHAPES: tuple[Shape, ...] = (
    *moe("mixtral-8x7b", "Mixtral-8x7B", 64, 2, 4096),
    *moe("qwen3-30b-a3b", "Qwen3-30B-A3B", 32, 8, 2048),
    Shape("bert-base-embedding", "BERT-base", "embedding", 30522, 128, 768),
)
# GPUs: a 1024-token batch (512 for DeepSeek-V3's 7168-wide rows), a 4096-token embedding lookup.
GPU_SHAPES: tuple[Shape, ...] = (
    *moe("mixtral-8x7b", "Mixtral-8x7B", 1024, 2, 4096),
    *moe("qwen3-30b-a3b", "Qwen3-30B-A3B", 1024, 8, 2048),
    *moe("deepseek-v3", "DeepSeek-V3", 512, 8, 7168),
    Shape("llama3-8b-embedding", "Llama-3-8B", "embedding", 128256, 4096, 4096),
)

ENTRY_POINT = "gather_scatter"


# ---- the kernels ----------------------------------------------------------------------------------

def gather_mlir(s: Shape, elem: str) -> str:
    table_t = f"tensor<{s.source_rows}x{s.hidden}x{elem}>"
    out_t = f"tensor<{s.rows}x{s.hidden}x{elem}>"
    return f"""\
func.func @{ENTRY_POINT}(%table: {table_t}, %idx: tensor<{s.rows}xi32>) -> {out_t} {{
  %empty = tensor.empty() : {out_t}
  %out = linalg.generic {{indexing_maps = [affine_map<(r, h) -> (r)>, affine_map<(r, h) -> (r, h)>],
                          iterator_types = ["parallel", "parallel"]}}
      ins(%idx : tensor<{s.rows}xi32>) outs(%empty : {out_t}) {{
    ^bb0(%i: i32, %unused: {elem}):
      %row = arith.index_cast %i : i32 to index
      %col = linalg.index 1 : index
      %value = tensor.extract %table[%row, %col] : {table_t}
      linalg.yield %value : {elem}
  }} -> {out_t}
  return %out : {out_t}
}}
"""


def combine_mlir(s: Shape, elem: str) -> str:
    y_t = f"tensor<{s.rows}x{s.hidden}x{elem}>"
    upd_t = f"tensor<{s.rows}x{s.hidden}xf32>"
    out_t = f"tensor<{s.source_rows}x{s.hidden}xf32>"
    to_f32 = f"%yf = arith.extf %y : {elem} to f32" if elem != "f32" else "%yf = arith.addf %y, %zero : f32"
    return f"""\
func.func @{ENTRY_POINT}(%residual: {out_t}, %ys: {y_t}, %token: tensor<{s.rows}x1xi32>, %w: tensor<{s.rows}xf32>) -> {out_t} {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : {upd_t}
  %updates = linalg.generic {{indexing_maps = [affine_map<(r, h) -> (r, h)>, affine_map<(r, h) -> (r)>,
                                              affine_map<(r, h) -> (r, h)>],
                              iterator_types = ["parallel", "parallel"]}}
      ins(%ys, %w : {y_t}, tensor<{s.rows}xf32>) outs(%empty : {upd_t}) {{
    ^bb0(%y: {elem}, %weight: f32, %unused: f32):
      {to_f32}
      %u = arith.mulf %yf, %weight : f32
      linalg.yield %u : f32
  }} -> {upd_t}
  %out = iree_linalg_ext.scatter dimension_map = [0] unique_indices(false)
      ins(%updates, %token : {upd_t}, tensor<{s.rows}x1xi32>) outs(%residual : {out_t}) {{
    ^bb0(%update: f32, %current: f32):
      %sum = arith.addf %update, %current : f32
      iree_linalg_ext.yield %sum : f32
  }} -> {out_t}
  return %out : {out_t}
}}
"""


def segmented_combine_mlir(s: Shape, elem: str) -> str:
    y_t = f"tensor<{s.rows}x{s.hidden}x{elem}>"
    route_t = f"tensor<{s.source_rows}x{s.top_k}"
    out_t = f"tensor<{s.source_rows}x{s.hidden}xf32>"
    return f"""\
func.func @{ENTRY_POINT}(%ys: {y_t}, %pos: {route_t}xi32>, %w: {route_t}xf32>) -> {out_t} {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : {out_t}
  %init = linalg.fill ins(%zero : f32) outs(%empty : {out_t}) -> {out_t}
  %out = linalg.generic {{indexing_maps = [affine_map<(t, h, j) -> (t, j)>, affine_map<(t, h, j) -> (t, j)>,
                                          affine_map<(t, h, j) -> (t, h)>],
                          iterator_types = ["parallel", "parallel", "reduction"]}}
      ins(%pos, %w : {route_t}xi32>, {route_t}xf32>) outs(%init : {out_t}) {{
    ^bb0(%p: i32, %weight: f32, %acc: f32):
      %row = arith.index_cast %p : i32 to index
      %col = linalg.index 1 : index
      %y = tensor.extract %ys[%row, %col] : {y_t}
      %yf = arith.extf %y : {elem} to f32
      %u = arith.mulf %yf, %weight : f32
      %sum = arith.addf %u, %acc : f32
      linalg.yield %sum : f32
  }} -> {out_t}
  return %out : {out_t}
}}
"""


def is_segmented(s: Shape, elem: str) -> bool:
    """The GPU combine (f16 rows) takes the segmented-sum form; the CPU one the scatter form."""
    return s.op == "combine" and elem != "f32"


def make_source(shape: Shape, elem: str, target: Target) -> IreeSource:
    if is_segmented(shape, elem):
        return IreeSource(mlir=segmented_combine_mlir(shape, elem), entry_point=ENTRY_POINT)
    text = combine_mlir(shape, elem) if shape.op == "combine" else gather_mlir(shape, elem)
    return IreeSource(mlir=text, entry_point=ENTRY_POINT)


# ---- launch, reference, roofline ----------------------------------------------------------------

def tensors(s: Shape, dtype: str, segmented: bool) -> tuple[TensorSpec, ...]:
    if segmented:
        return (
            TensorSpec(name="y", role="input", shape=[s.rows, s.hidden], dtype=dtype, init="normal"),
            TensorSpec(name="pos", role="input", shape=[s.source_rows, s.top_k], dtype="i32", init="permutation", high=s.rows),
            TensorSpec(name="w", role="input", shape=[s.source_rows, s.top_k], dtype="f32", init="uniform"),
            TensorSpec(name="out", role="output", shape=[s.source_rows, s.hidden], dtype="f32", init="none"),
        )
    if s.op == "combine":
        return (
            TensorSpec(name="residual", role="input", shape=[s.source_rows, s.hidden], dtype="f32", init="normal"),
            TensorSpec(name="y", role="input", shape=[s.rows, s.hidden], dtype=dtype, init="normal"),
            TensorSpec(name="token", role="input", shape=[s.rows, 1], dtype="i32", init="randint", low=0, high=s.source_rows),
            TensorSpec(name="w", role="input", shape=[s.rows], dtype="f32", init="uniform"),
            TensorSpec(name="out", role="output", shape=[s.source_rows, s.hidden], dtype="f32", init="none"),
        )
    return (
        TensorSpec(name="table", role="input", shape=[s.source_rows, s.hidden], dtype=dtype, init="normal"),
        TensorSpec(name="idx", role="input", shape=[s.rows], dtype="i32", init="randint", low=0, high=s.source_rows),
        TensorSpec(name="out", role="output", shape=[s.rows, s.hidden], dtype=dtype, init="none"),
    )


def reference(s: Shape, segmented: bool) -> ReferenceSpec:
    if segmented:   # f32 sums of top-k weighted rows
        return ReferenceSpec(module="gather_scatter.reference", function="combine_rows", atol=1e-5, rtol=1e-5)
    if s.op == "combine":
        # f32 sums of a few weighted rows (random tokens: ~top-k rows each, a handful at most)
        return ReferenceSpec(module="gather_scatter.reference", function="scatter_add_rows", atol=1e-5, rtol=1e-5)
    return ReferenceSpec(module="gather_scatter.reference", function="gather_rows", atol=0.0, rtol=0.0)  # a copy: exact


def flops(s: Shape) -> int:
    return 2 * s.rows * s.hidden if s.op == "combine" else 0    # multiply and add per element


def bytes_moved(s: Shape, item_bytes: int, segmented: bool) -> int:
    if segmented:   # read every row, the routing (pos, w), write the f32 output
        return s.rows * s.hidden * item_bytes + 8 * s.rows + 4 * s.source_rows * s.hidden
    if s.op == "combine":   # read y, w, token and the residual, write the output
        return s.rows * s.hidden * item_bytes + 8 * s.rows + 2 * 4 * s.source_rows * s.hidden
    return 2 * s.rows * s.hidden * item_bytes + 4 * s.rows   # read the rows, write them, read the index


def case(shape: Shape, kind: tuple[str, str, int], targets: tuple[str, ...]) -> KernelCase:
    elem, dtype, item_bytes = kind
    segmented = is_segmented(shape, elem)
    arguments = (("y", "pos", "w") if segmented else ("residual", "y", "token", "w")) if shape.op == "combine" \
        else ("table", "idx")
    return KernelCase(
        case_id=CaseId(family="gather-scatter", name=shape.name, shape=shape.label, dtype=dtype, impl="iree"),
        model=shape.model,
        targets=targets,
        tensors=tensors(shape, dtype, segmented),
        arguments=arguments,
        results=("out",),
        reference=reference(shape, segmented),
        flops=flops(shape),
        bytes=bytes_moved(shape, item_bytes, segmented),
        make_source=partial(make_source, shape, elem),
        source_files=("gather_scatter/iree_cases.py", "gather_scatter/reference.py", "iree_targets.py"),
    )


def cases() -> list[KernelCase]:
    return [*(case(s, F32, CPU) for s in CPU_SHAPES), *(case(s, F16, GPU) for s in GPU_SHAPES)]
