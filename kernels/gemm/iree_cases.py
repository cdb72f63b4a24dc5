"""GEMM through IREE, C[M, N] = A[M, K] @ B[K, N]: f32 on CPUs (`llvm-cpu:*`), f16 inputs with f32
accumulation on GPUs (Vulkan, HIP, CUDA sm_8x).

Read top to bottom: the shapes (named by the model they come from), the per-shape tile knob, the
kernel (MLIR: `linalg.fill` zeros into `tensor.empty`, then `linalg.matmul`), its launch and
reference description, its FLOP/byte counts, and the case list.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from pipeline.build.suite_api import IreeSource, KernelCase
from pipeline.contracts.ids import CaseId, Target
from pipeline.contracts.manifest import ReferenceSpec, TensorSpec

from ..iree_targets import CPU, F16, F32, GPU, is_llvm_cpu


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


# Llama-3-8B attention projections (hidden 4096): q_proj is 4096 -> 4096. Decode is M = tokens in
# flight (1 and 16); prefill is kept at M=32 so one call stays ~60 ms on one CPU core (M=128 took
# ~240 ms on the 2-core builder). Square shapes calibrate the roofline.
SHAPES: tuple[Shape, ...] = (
    Shape("llama3-8b-q-proj-decode", "Llama-3-8B", 1, 4096, 4096),
    Shape("llama3-8b-q-proj-decode", "Llama-3-8B", 16, 4096, 4096),
    Shape("llama3-8b-q-proj-prefill", "Llama-3-8B", 32, 4096, 4096),
    Shape("square-256", "calibration", 256, 256, 256),
    Shape("square-512", "calibration", 512, 512, 512),
    Shape("square-1024", "calibration", 1024, 1024, 1024),
)

# GPUs (f16 in, f32 accumulate and out): Llama-3-8B projections as in the Triton cases (X @ W,
# M = tokens), a prefill chunk of 4096 tokens and a 16-token decode step, and one square.
GPU_SHAPES: tuple[Shape, ...] = (
    Shape("llama3-8b-qkv-proj-prefill", "Llama-3-8B", 4096, 6144, 4096),
    Shape("llama3-8b-mlp-down-prefill", "Llama-3-8B", 4096, 4096, 14336),
    Shape("llama3-8b-mlp-up-decode", "Llama-3-8B", 16, 14336, 4096),
    Shape("square-4096", "square", 4096, 4096, 4096),
)


@dataclass(frozen=True)
class Tile:
    """IREE llvm-cpu tiling for one shape (DoubleTilingExpert pipeline): sizes over (M, N, K)."""

    distribution: tuple[int, int] = (64, 64)    # per-workgroup tile of (M, N)
    vector: tuple[int, int] = (8, 32)           # register tile of (M, N)
    reduction: int = 1                          # K step of the inner vector loop

    def compilation_info(self) -> str:
        (dm, dn), (vm, vn) = self.distribution, self.vector
        return (
            "#iree_codegen.compilation_info<"
            f"lowering_config = #iree_cpu.lowering_config<distribution = [{dm}, {dn}, 0], "
            f"vector_common_parallel = [{vm}, {vn}, 0], vector_reduction = [0, 0, {self.reduction}]>, "
            "translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>"
        )


# Per-shape tile override, keyed by "name/MxNxK"; a shape not listed gets IREE's own choice.
# Example (2.5x slower on square-512, still correct):
#     "square-512/512x512x512": Tile(vector=(1, 16)),
TILES: dict[str, Tile] = {}


# ---- the kernel ---------------------------------------------------------------------------------

ENTRY_POINT = "matmul"


def mlir(shape: Shape, tile: Tile | None, elem: str = "f32") -> str:
    """C (f32) = A @ B with A, B in `elem` (f32 or f16); linalg.matmul extends the inputs to f32."""
    m, n, k = shape.m, shape.n, shape.k
    attrs = f" {{compilation_info = {tile.compilation_info()}}}" if tile else ""
    return f"""\
func.func @{ENTRY_POINT}(%a: tensor<{m}x{k}x{elem}>, %b: tensor<{k}x{n}x{elem}>) -> tensor<{m}x{n}xf32> {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<{m}x{n}xf32>
  %c0 = linalg.fill ins(%zero : f32) outs(%empty : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %c = linalg.matmul{attrs} ins(%a, %b : tensor<{m}x{k}x{elem}>, tensor<{k}x{n}x{elem}>)
                     outs(%c0 : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  return %c : tensor<{m}x{n}xf32>
}}
"""


def make_source(shape: Shape, elem: str, target: Target) -> IreeSource:
    tile = TILES.get(f"{shape.name}/{shape.label}") if is_llvm_cpu(target) else None
    return IreeSource(mlir=mlir(shape, tile, elem), entry_point=ENTRY_POINT)


# ---- launch, reference, roofline ----------------------------------------------------------------

def tensors(shape: Shape, dtype: str) -> tuple[TensorSpec, ...]:
    return (
        TensorSpec(name="a", role="input", shape=[shape.m, shape.k], dtype=dtype, init="normal"),
        TensorSpec(name="b", role="input", shape=[shape.k, shape.n], dtype=dtype, init="normal"),
        TensorSpec(name="c", role="output", shape=[shape.m, shape.n], dtype="f32", init="none"),
    )


def reference(shape: Shape) -> ReferenceSpec:
    # f32 accumulation over K standard-normal products: error grows ~ sqrt(K) * eps * |c|; measured
    # worst 9e-4 at K=4096, 1e-4 at K=512. atol = 5e-6 * K keeps a 10-20x margin and still catches
    # an off-by-one-element kernel (errors of order 1).
    # f16 inputs are exact in the reference too (it gets the same f16 arrays), so the same bound holds.
    return ReferenceSpec(module="gemm.reference", function="matmul", atol=5e-6 * shape.k, rtol=1e-5)


def flops(shape: Shape) -> int:
    return 2 * shape.m * shape.n * shape.k


def bytes_moved(shape: Shape, item_bytes: int) -> int:
    return item_bytes * (shape.m * shape.k + shape.k * shape.n) + 4 * shape.m * shape.n


def case(shape: Shape, kind: tuple[str, str, int], targets: tuple[str, ...]) -> KernelCase:
    elem, dtype, item_bytes = kind
    return KernelCase(
        case_id=CaseId(family="gemm", name=shape.name, shape=shape.label, dtype=dtype, impl="iree"),
        model=shape.model,
        targets=targets,
        tensors=tensors(shape, dtype),
        arguments=("a", "b"),
        results=("c",),
        reference=reference(shape),
        flops=flops(shape),
        bytes=bytes_moved(shape, item_bytes),
        make_source=partial(make_source, shape, elem),
        source_files=("gemm/iree_cases.py", "gemm/reference.py", "iree_targets.py"),
    )


def cases() -> list[KernelCase]:
    return [*(case(shape, F32, CPU) for shape in SHAPES), *(case(shape, F16, GPU) for shape in GPU_SHAPES)]
