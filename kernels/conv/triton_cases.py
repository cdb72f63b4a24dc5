"""Convolution forward in Triton, NHWC, bf16 in/out, fp32 accumulate: implicit GEMM for dense layers,
a direct kernel for depthwise ones; for `cuda:sm_90` (run) and `hip:gfx942|gfx950|gfx1250` (build-only).

Read top to bottom: the layers (named by the network they come from), the one tile table, the
kernels (`conv/triton_kernel.py`), their launch, the reference check, the FLOP/byte counts and the
case list. This module imports no compiler.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from pipeline.build.suite_api import KernelCase, Pointer, Scalar, TritonSource
from pipeline.contracts.ids import CaseId, Target
from pipeline.contracts.manifest import ReferenceSpec, ReferenceSubset, TensorSpec


@dataclass(frozen=True)
class Layer:
    name: str         # case name: network and layer
    model: str
    h: int            # input height = width
    c: int            # input channels
    k: int            # output channels (depthwise: = c)
    r: int            # filter height = width; padding is "same": (r - 1) // 2
    stride: int
    depthwise: bool = False

    @property
    def pad(self) -> int:
        return (self.r - 1) // 2

    @property
    def p(self) -> int:
        return (self.h + 2 * self.pad - self.r) // self.stride + 1


@dataclass(frozen=True)
class Shape:
    layer: Layer
    n: int            # batch

    @property
    def label(self) -> str:
        ly = self.layer
        return f"{self.n}x{ly.h}x{ly.h}x{ly.c}-{ly.k}x{ly.r}x{ly.r}-s{ly.stride}"


# ResNet-50 (224x224 input): the 7x7 stride-2 stem, conv2_x's 1x1 expansion and 3x3, conv3_x's
# stride-2 3x3 (torchvision's v1.5 puts the stride there), conv4_x's 3x3 at 14x14.
# MobileNetV2 (224x224): its 3x3 stride-2 stem, depthwise 3x3 at 112x112 (32 ch), stride 2 (96 ch)
# and 56x56 (144 ch), and the 1x1 expand / project pair of its 56x56 blocks (24 <-> 144).
LAYERS: tuple[Layer, ...] = (
    Layer("resnet50-stem", "ResNet-50", 224, 3, 64, 7, 2),
    Layer("resnet50-conv2-1x1-expand", "ResNet-50", 56, 64, 256, 1, 1),
    Layer("resnet50-conv2-3x3", "ResNet-50", 56, 64, 64, 3, 1),
    Layer("resnet50-conv3-3x3-s2", "ResNet-50", 56, 128, 128, 3, 2),
    Layer("resnet50-conv4-3x3", "ResNet-50", 14, 256, 256, 3, 1),
    Layer("mobilenetv2-stem", "MobileNetV2", 224, 3, 32, 3, 2),
    Layer("mobilenetv2-dw-112", "MobileNetV2", 112, 32, 32, 3, 1, depthwise=True),
    Layer("mobilenetv2-dw-112-s2", "MobileNetV2", 112, 96, 96, 3, 2, depthwise=True),
    Layer("mobilenetv2-dw-56", "MobileNetV2", 56, 144, 144, 3, 1, depthwise=True),
    Layer("mobilenetv2-expand-1x1", "MobileNetV2", 56, 24, 144, 1, 1),
    Layer("mobilenetv2-project-1x1", "MobileNetV2", 56, 144, 24, 1, 1),
)
BATCHES = (1, 32)

SHAPES: tuple[Shape, ...] = (
    *(Shape(layer, n) for layer in LAYERS for n in BATCHES),
    Shape(Layer("small-3x3", "test", 16, 32, 64, 3, 1), 2),             # small: the GPU tests' cases
    Shape(Layer("small-dw-s2", "test", 16, 32, 32, 3, 2, depthwise=True), 2),
)


@dataclass(frozen=True)
class Tile:
    """Implicit GEMM: BLOCK_M output pixels x BLOCK_N output channels, BLOCK_K reduction step.
    Depthwise: BLOCK_M pixels x BLOCK_N channels (BLOCK_K unused)."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int = 8


def is_gfx1250(target: Target) -> bool:
    """gfx1250: wave32 (Triton 3.9 compiles it with 32-wide waves), 320 KiB of LDS: its own column."""
    return target.backend == "hip" and target.arch == "gfx1250"


def platform(target: Target) -> str:
    if target.backend == "cuda":
        return "hopper"
    return "gfx1250" if is_gfx1250(target) else "cdna"


def kind(layer: Layer) -> str:
    """Which row of TILES: depthwise; dense with many output channels (wide), or few (narrow)."""
    if layer.depthwise:
        return "depthwise"
    return "wide" if layer.k >= 128 else "narrow"


# One entry per (kind, platform). Hopper: 128-pixel tiles on wgmma, 3-4 stages; a narrow layer
# (K <= 64 channels) gets 64-wide N tiles so no half-empty tile is computed. CDNA: 64 KiB of LDS on
# gfx942, two stages. Depthwise: 64 pixels x 64 channels of plain FMAs (memory-bound).
TILES: dict[tuple[str, str], Tile] = {
    ("wide", "hopper"): Tile(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3),
    ("narrow", "hopper"): Tile(block_m=128, block_n=64, block_k=64, num_warps=4, num_stages=4),
    ("depthwise", "hopper"): Tile(block_m=64, block_n=64, block_k=0, num_warps=4, num_stages=1),
    ("wide", "cdna"): Tile(block_m=128, block_n=128, block_k=32, num_warps=4, num_stages=2),
    ("narrow", "cdna"): Tile(block_m=128, block_n=64, block_k=32, num_warps=4, num_stages=2),
    ("depthwise", "cdna"): Tile(block_m=64, block_n=64, block_k=0, num_warps=4, num_stages=1),
    ("wide", "gfx1250"): Tile(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=2),
    ("narrow", "gfx1250"): Tile(block_m=128, block_n=64, block_k=64, num_warps=4, num_stages=2),
    ("depthwise", "gfx1250"): Tile(block_m=64, block_n=64, block_k=0, num_warps=4, num_stages=1),
}


# ---- the kernels and their launch --------------------------------------------------------------

KERNEL_MODULE = "conv.triton_kernel"


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def grid(shape: Shape, tile: Tile) -> tuple[int, ...]:
    """Implicit GEMM: one program per tile of Y viewed as [N*P*Q, K] (1-D, grouped). Depthwise:
    (pixel blocks, channel blocks)."""
    ly, pixels = shape.layer, shape.n * shape.layer.p * shape.layer.p
    if ly.depthwise:
        return (cdiv(pixels, tile.block_m), cdiv(ly.c, tile.block_n))
    return (cdiv(pixels, tile.block_m) * cdiv(ly.k, tile.block_n),)


def make_source(shape: Shape, target: Target) -> TritonSource:
    ly = shape.layer
    tile = TILES[(kind(ly), platform(target))]
    pointers = {"x_ptr": Pointer("x", "bf16"), "w_ptr": Pointer("w", "bf16"), "y_ptr": Pointer("y", "bf16")}
    sizes = {"N": Scalar(shape.n), "H": Scalar(ly.h), "W": Scalar(ly.h), "C": Scalar(ly.c)}
    out = {"P": Scalar(ly.p), "Q": Scalar(ly.p)}
    geometry = {"STRIDE": ly.stride, "PAD": ly.pad, "R": ly.r, "S": ly.r}
    if ly.depthwise:
        return TritonSource(
            module=KERNEL_MODULE, function="conv2d_depthwise_kernel",
            args={**pointers, **sizes, **out},
            constexprs={**geometry, "BLOCK_P": tile.block_m, "BLOCK_C": min(tile.block_n, ly.c)},
            grid=grid(shape, tile), num_warps=tile.num_warps, num_stages=tile.num_stages,
        )
    return TritonSource(
        module=KERNEL_MODULE, function="conv2d_implicit_gemm_kernel",
        args={**pointers, **sizes, "K": Scalar(ly.k), **out},
        constexprs={**geometry, "BLOCK_M": tile.block_m, "BLOCK_N": tile.block_n, "BLOCK_K": tile.block_k,
                    "GROUP_M": tile.group_m},
        grid=grid(shape, tile), num_warps=tile.num_warps, num_stages=tile.num_stages,
    )


# ---- reference, roofline -----------------------------------------------------------------------

def tensors(shape: Shape) -> tuple[TensorSpec, ...]:
    """X [N, H, W, C], W [K, R, S, C] (depthwise [C, R, S]), Y [N, P, Q, K]; cuDNN takes the same."""
    ly = shape.layer
    w_shape = [ly.c, ly.r, ly.r] if ly.depthwise else [ly.k, ly.r, ly.r, ly.c]
    return (
        TensorSpec(name="x", role="input", shape=[shape.n, ly.h, ly.h, ly.c], dtype="bf16"),
        TensorSpec(name="w", role="input", shape=w_shape, dtype="bf16"),
        TensorSpec(name="y", role="output", shape=[shape.n, ly.p, ly.p, ly.k], dtype="bf16", init="none"),
    )


# Output rows compared with the float64 reference: a random subset of REFERENCE_ROWS rows p (every
# batch image, every column and channel of them); all of Y is still checked to be written.
REFERENCE_ROWS = 8


def reference(shape: Shape) -> ReferenceSpec:
    # Sums of R*S*C standard-normal products (up to 2304 terms: |y| ~ 50), fp32-accumulated, rounded to
    # bf16 (2^-9 relative): rtol = 1e-2; atol = 0.05 covers the accumulation order's rounding near 0.
    ly = shape.layer
    function = f"{'depthwise_' if ly.depthwise else ''}conv2d_stride{ly.stride}"
    subset = ReferenceSubset(axis=1, count=REFERENCE_ROWS) if ly.p > REFERENCE_ROWS else None
    return ReferenceSpec(module="conv.reference", function=function, atol=5e-2, rtol=1e-2, subset=subset)


def flops(shape: Shape) -> int:
    ly = shape.layer
    per_pixel = ly.c * ly.r * ly.r * (1 if ly.depthwise else ly.k)
    return 2 * shape.n * ly.p * ly.p * per_pixel


def bytes_moved(shape: Shape) -> int:
    ly = shape.layer
    weights = ly.c * ly.r * ly.r * (1 if ly.depthwise else ly.k)
    return 2 * (shape.n * ly.h * ly.h * ly.c + weights + shape.n * ly.p * ly.p * ly.k)


TARGETS = ("cuda:sm_90", "hip:gfx942", "hip:gfx950", "hip:gfx1250")


def case_id(shape: Shape, impl: str) -> CaseId:
    return CaseId(family="conv", name=shape.layer.name, shape=shape.label, dtype="bf16", impl=impl)


def case(shape: Shape) -> KernelCase:
    return KernelCase(
        case_id=case_id(shape, "triton"),
        model=shape.layer.model,
        targets=TARGETS,
        tensors=tensors(shape),
        arguments=("x", "w"),
        results=("y",),
        reference=reference(shape),
        flops=flops(shape),
        bytes=bytes_moved(shape),
        make_source=partial(make_source, shape),
        source_files=("conv/triton_cases.py", "conv/triton_kernel.py", "conv/reference.py"),
    )


def cases() -> list[KernelCase]:
    return [case(shape) for shape in SHAPES]
