"""Scaled dot-product attention through IREE with grouped-query heads (GQA): f32 on CPUs, f16 on
GPUs (f32 softmax and accumulation inside).

GQA by a batch mapping, no repeated KV: Q is [B, HKV, G, S, D] (G query heads share one KV head),
K and V are [B, HKV, SKV, D], and the indexing maps broadcast K and V over G. Two formulations:
- fused, `iree_linalg_ext.attention` (online softmax, scores never materialised): CPUs, HIP, CUDA;
- composed for Vulkan, where 3.13 cannot lower the fused op ("online_attention ... got memref"):
  a QK^T contraction, `linalg.softmax`, a PV contraction; the S x SKV scores live in memory.
Read top to bottom: the head configurations and sequence shapes, the kernels, reference, FLOP/byte
counts and the case list. No causal mask (decode attends to the whole cache; prefill cases measure
the full S x S attention).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

from pipeline.build.suite_api import IreeSource, KernelCase
from pipeline.contracts.ids import CaseId, Target
from pipeline.contracts.manifest import ReferenceSpec, TensorSpec

from ..iree_targets import CPU, F16, F32, MOBILE_GPU, SERVER_GPU, is_vulkan


@dataclass(frozen=True)
class Shape:
    name: str       # case name: model and phase
    model: str
    batch: int
    heads: int      # query heads
    kv_heads: int
    seq: int        # query tokens
    kv_seq: int     # keys/values attended to
    head_dim: int = 128

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def label(self) -> str:   # B x H x HKV x S x SKV x D
        return f"{self.batch}x{self.heads}x{self.kv_heads}x{self.seq}x{self.kv_seq}x{self.head_dim}"


# Head configurations: Llama-3-8B 32 query / 8 KV heads of 128; Qwen3-30B-A3B 32 / 4 of 128.
# CPUs: a 128-token prefill (268 MFLOP) and a one-token decode over 1024 cached tokens.
CPU_SHAPES: tuple[Shape, ...] = (
    Shape("llama3-8b-prefill", "Llama-3-8B", 1, 32, 8, 128, 128),
    Shape("llama3-8b-decode", "Llama-3-8B", 1, 32, 8, 1, 1024),
    Shape("qwen3-30b-a3b-decode", "Qwen3-30B-A3B", 1, 32, 4, 1, 1024),
)
# Phone GPUs: the CPU shapes with a 512-token prefill (the composed form keeps S x SKV scores).
MOBILE_SHAPES: tuple[Shape, ...] = (
    Shape("llama3-8b-prefill", "Llama-3-8B", 1, 32, 8, 512, 512),
    Shape("llama3-8b-decode", "Llama-3-8B", 1, 32, 8, 1, 1024),
    Shape("qwen3-30b-a3b-decode", "Qwen3-30B-A3B", 1, 32, 4, 1, 1024),
)
# Server GPUs: a 4096-token prefill, and a decode batch of 16 over 4096 cached tokens.
SERVER_SHAPES: tuple[Shape, ...] = (
    Shape("llama3-8b-prefill", "Llama-3-8B", 1, 32, 8, 4096, 4096),
    Shape("llama3-8b-decode", "Llama-3-8B", 16, 32, 8, 1, 4096),
    Shape("qwen3-30b-a3b-prefill", "Qwen3-30B-A3B", 1, 32, 4, 4096, 4096),
    Shape("qwen3-30b-a3b-decode", "Qwen3-30B-A3B", 16, 32, 4, 1, 4096),
)

ENTRY_POINT = "attention"


# ---- the kernels ----------------------------------------------------------------------------------

def _types(s: Shape, elem: str) -> tuple[str, str]:
    q = f"tensor<{s.batch}x{s.kv_heads}x{s.group}x{s.seq}x{s.head_dim}x{elem}>"
    kv = f"tensor<{s.batch}x{s.kv_heads}x{s.kv_seq}x{s.head_dim}x{elem}>"
    return q, kv


def fused_mlir(s: Shape, elem: str) -> str:
    q_t, kv_t = _types(s, elem)
    return f"""\
func.func @{ENTRY_POINT}(%q: {q_t}, %k: {kv_t}, %v: {kv_t}) -> {q_t} {{
  %scale = arith.constant {1 / math.sqrt(s.head_dim)!r} : {elem}
  %empty = tensor.empty() : {q_t}
  %o = iree_linalg_ext.attention <{{indexing_maps = [
      affine_map<(b, h, g, m, n, k1, k2) -> (b, h, g, m, k1)>,
      affine_map<(b, h, g, m, n, k1, k2) -> (b, h, k2, k1)>,
      affine_map<(b, h, g, m, n, k1, k2) -> (b, h, k2, n)>,
      affine_map<(b, h, g, m, n, k1, k2) -> ()>,
      affine_map<(b, h, g, m, n, k1, k2) -> (b, h, g, m, n)>]}}>
      ins(%q, %k, %v, %scale : {q_t}, {kv_t}, {kv_t}, {elem}) outs(%empty : {q_t}) {{
    ^bb0(%score: f32):
      iree_linalg_ext.yield %score : f32
  }} -> {q_t}
  return %o : {q_t}
}}
"""



def composed_mlir(s: Shape, elem: str) -> str:
    q_t, kv_t = _types(s, elem)
    b, h, g, m, n, d = s.batch, s.kv_heads, s.group, s.seq, s.kv_seq, s.head_dim
    s_t = f"tensor<{b}x{h}x{g}x{m}x{n}xf32>"
    o32_t = f"tensor<{b}x{h}x{g}x{m}x{d}xf32>"
    ew5 = 'iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]'
    id5 = "affine_map<(b, h, g, m, n) -> (b, h, g, m, n)>"
    to_f32 = (lambda v, r: f"%{r} = arith.extf {v} : {elem} to f32") if elem != "f32" else (lambda v, r: f"%{r} = arith.mulf {v}, %one : f32")
    to_out = "%r = arith.truncf %a : f32 to f16" if elem != "f32" else "%r = arith.mulf %a, %one : f32"
    return f"""\
func.func @{ENTRY_POINT}(%q: {q_t}, %k: {kv_t}, %v: {kv_t}) -> {q_t} {{
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %scale = arith.constant {1 / math.sqrt(d)!r} : f32
  %se = tensor.empty() : {s_t}
  %s0 = linalg.fill ins(%zero : f32) outs(%se : {s_t}) -> {s_t}
  %s = linalg.generic {{indexing_maps = [
        affine_map<(b, h, g, m, n, d) -> (b, h, g, m, d)>,
        affine_map<(b, h, g, m, n, d) -> (b, h, n, d)>,
        affine_map<(b, h, g, m, n, d) -> (b, h, g, m, n)>],
      iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction"]}}
      ins(%q, %k : {q_t}, {kv_t}) outs(%s0 : {s_t}) {{
    ^bb0(%a: {elem}, %b: {elem}, %acc: f32):
      {to_f32("%a", "af")}
      {to_f32("%b", "bf")}
      %p = arith.mulf %af, %bf : f32
      %r = arith.addf %acc, %p : f32
      linalg.yield %r : f32
  }} -> {s_t}
  %ss = linalg.generic {{indexing_maps = [{id5}, {id5}], {ew5}}} ins(%s : {s_t}) outs(%se : {s_t}) {{
    ^bb0(%a: f32, %o: f32):
      %r = arith.mulf %a, %scale : f32
      linalg.yield %r : f32
  }} -> {s_t}
  %pe = tensor.empty() : {s_t}
  %p = linalg.softmax dimension(4) ins(%ss : {s_t}) outs(%pe : {s_t}) -> {s_t}
  %oe = tensor.empty() : {o32_t}
  %o0 = linalg.fill ins(%zero : f32) outs(%oe : {o32_t}) -> {o32_t}
  %o = linalg.generic {{indexing_maps = [
        affine_map<(b, h, g, m, d, n) -> (b, h, g, m, n)>,
        affine_map<(b, h, g, m, d, n) -> (b, h, n, d)>,
        affine_map<(b, h, g, m, d, n) -> (b, h, g, m, d)>],
      iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction"]}}
      ins(%p, %v : {s_t}, {kv_t}) outs(%o0 : {o32_t}) {{
    ^bb0(%a: f32, %b: {elem}, %acc: f32):
      {to_f32("%b", "bf")}
      %pr = arith.mulf %a, %bf : f32
      %r = arith.addf %acc, %pr : f32
      linalg.yield %r : f32
  }} -> {o32_t}
  %he = tensor.empty() : {q_t}
  %out = linalg.generic {{indexing_maps = [{id5}, {id5}], {ew5}}} ins(%o : {o32_t}) outs(%he : {q_t}) {{
    ^bb0(%a: f32, %x: {elem}):
      {to_out}
      linalg.yield %r : {elem}
  }} -> {q_t}
  return %out : {q_t}
}}
"""


def make_source(shape: Shape, elem: str, target: Target) -> IreeSource:
    text = composed_mlir(shape, elem) if is_vulkan(target) else fused_mlir(shape, elem)
    return IreeSource(mlir=text, entry_point=ENTRY_POINT)


# ---- launch, reference, roofline ----------------------------------------------------------------

def tensors(s: Shape, dtype: str) -> tuple[TensorSpec, ...]:
    q = [s.batch, s.kv_heads, s.group, s.seq, s.head_dim]
    kv = [s.batch, s.kv_heads, s.kv_seq, s.head_dim]
    return (
        TensorSpec(name="q", role="input", shape=q, dtype=dtype, init="normal"),
        TensorSpec(name="k", role="input", shape=kv, dtype=dtype, init="normal"),
        TensorSpec(name="v", role="input", shape=kv, dtype=dtype, init="normal"),
        TensorSpec(name="o", role="output", shape=q, dtype=dtype, init="none"),
    )


def reference(dtype: str) -> ReferenceSpec:
    # The output is a convex combination of V rows (|o| <~ 3 for normal V). f32: softmax and sums
    # in f32 err ~1e-6; f16: the output is rounded to f16 (2^-11 relative) and the scores see f16
    # rounding of the scale; 2e-3 + 1e-2 |o| leaves a margin and still catches a wrong row.
    atol, rtol = (1e-4, 1e-4) if dtype == "f32" else (2e-3, 1e-2)
    return ReferenceSpec(module="attention.iree_reference", function="gqa_attention", atol=atol, rtol=rtol)


def flops(s: Shape) -> int:
    return 4 * s.batch * s.heads * s.seq * s.kv_seq * s.head_dim      # QK^T and PV


def bytes_moved(s: Shape, item_bytes: int) -> int:
    q = s.batch * s.heads * s.seq * s.head_dim
    kv = s.batch * s.kv_heads * s.kv_seq * s.head_dim
    return item_bytes * (2 * q + 2 * kv)


def case(shape: Shape, kind: tuple[str, str, int], targets: tuple[str, ...]) -> KernelCase:
    elem, dtype, item_bytes = kind
    return KernelCase(
        case_id=CaseId(family="attention", name=shape.name, shape=shape.label, dtype=dtype, impl="iree"),
        model=shape.model,
        targets=targets,
        tensors=tensors(shape, dtype),
        arguments=("q", "k", "v"),
        results=("o",),
        reference=reference(dtype),
        flops=flops(shape),
        bytes=bytes_moved(shape, item_bytes),
        make_source=partial(make_source, shape, elem),
        source_files=("attention/iree_cases.py", "attention/iree_reference.py", "iree_targets.py"),
    )


def cases() -> list[KernelCase]:
    return [
        *(case(s, F32, CPU) for s in CPU_SHAPES),
        *(case(s, F16, MOBILE_GPU) for s in MOBILE_SHAPES),
        *(case(s, F16, SERVER_GPU) for s in SERVER_SHAPES),
    ]
