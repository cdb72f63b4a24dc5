"""Convolutions through IREE, NHWC: `linalg.conv_2d_nhwc_hwcf` (ResNet-50) and
`linalg.depthwise_conv_2d_nhwc_hwc` (MobileNetV2), f32 on CPUs, f16 inputs with f32 accumulation
on GPUs.

Read top to bottom: the layers (named by the model they come from), the kernel (MLIR: zeros, then
the convolution over an input that arrives padded), its reference, its FLOP/byte counts, and the
case list. Batch 1 on CPUs and phone GPUs (one image, as a phone runs it), 32 on server GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from pipeline.build.suite_api import IreeSource, KernelCase
from pipeline.contracts.ids import CaseId, Target
from pipeline.contracts.manifest import ReferenceSpec, TensorSpec

from ..iree_targets import CPU, F16, F32, MOBILE_GPU, SERVER_GPU


@dataclass(frozen=True)
class Layer:
    name: str           # case name: the model layer
    model: str
    out_hw: int         # output height = width
    c: int              # input channels
    f: int              # output channels (== c for depthwise)
    k: int              # kernel height = width
    stride: int
    depthwise: bool = False

    @property
    def in_hw(self) -> int:
        """Padded input size: the valid convolution over it gives out_hw."""
        return (self.out_hw - 1) * self.stride + self.k

    def label(self, n: int) -> str:
        w = f"{self.k}x{self.k}x{self.c}" if self.depthwise else f"{self.k}x{self.k}x{self.c}x{self.f}"
        return f"{n}x{self.in_hw}x{self.in_hw}x{self.c}-{w}-s{self.stride}"


# ResNet-50 (v1.5): the 7x7/2 stem, a 3x3 of stage 2, the 3x3/2 of stage 3's first block, a 1x1
# of stage 5. MobileNetV2: the first block's 3x3 depthwise at 112x112x32, and a stride-2 depthwise
# (block 3, 112 -> 56 over 96 channels). Each is 5 to 240 MFLOP at batch 1.
LAYERS: tuple[Layer, ...] = (
    Layer("resnet50-conv1", "ResNet-50", 112, 3, 64, 7, 2),
    Layer("resnet50-res2-conv3x3", "ResNet-50", 56, 64, 64, 3, 1),
    Layer("resnet50-res3-conv3x3-s2", "ResNet-50", 28, 128, 128, 3, 2),
    Layer("resnet50-res5-conv1x1", "ResNet-50", 7, 2048, 512, 1, 1),
    Layer("mobilenetv2-block1-dw3x3", "MobileNetV2", 112, 32, 32, 3, 1, depthwise=True),
    Layer("mobilenetv2-block3-dw3x3-s2", "MobileNetV2", 56, 96, 96, 3, 2, depthwise=True),
)

ENTRY_POINT = "conv"


# ---- the kernel ---------------------------------------------------------------------------------

def mlir(layer: Layer, n: int, elem: str) -> str:
    h, o, c, f, k, s = layer.in_hw, layer.out_hw, layer.c, layer.f, layer.k, layer.stride
    x_t = f"tensor<{n}x{h}x{h}x{c}x{elem}>"
    w_t = f"tensor<{k}x{k}x{c}x{elem}>" if layer.depthwise else f"tensor<{k}x{k}x{c}x{f}x{elem}>"
    y_t = f"tensor<{n}x{o}x{o}x{f}xf32>"
    op = "linalg.depthwise_conv_2d_nhwc_hwc" if layer.depthwise else "linalg.conv_2d_nhwc_hwcf"
    return f"""\
func.func @{ENTRY_POINT}(%x: {x_t}, %w: {w_t}) -> {y_t} {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : {y_t}
  %y0 = linalg.fill ins(%zero : f32) outs(%empty : {y_t}) -> {y_t}
  %y = {op} {{dilations = dense<1> : tensor<2xi64>, strides = dense<{s}> : tensor<2xi64>}}
       ins(%x, %w : {x_t}, {w_t}) outs(%y0 : {y_t}) -> {y_t}
  return %y : {y_t}
}}
"""


def make_source(layer: Layer, n: int, elem: str, target: Target) -> IreeSource:
    return IreeSource(mlir=mlir(layer, n, elem), entry_point=ENTRY_POINT)


# ---- launch, reference, roofline ----------------------------------------------------------------

def tensors(layer: Layer, n: int, dtype: str) -> tuple[TensorSpec, ...]:
    h, k = layer.in_hw, layer.k
    w_shape = [k, k, layer.c] if layer.depthwise else [k, k, layer.c, layer.f]
    return (
        TensorSpec(name="x", role="input", shape=[n, h, h, layer.c], dtype=dtype, init="normal"),
        TensorSpec(name="w", role="input", shape=w_shape, dtype=dtype, init="normal"),
        TensorSpec(name="y", role="output", shape=[n, layer.out_hw, layer.out_hw, layer.f], dtype="f32", init="none"),
    )


def reduction(layer: Layer) -> int:
    return layer.k * layer.k * (1 if layer.depthwise else layer.c)


def reference(layer: Layer) -> ReferenceSpec:
    # f32 sums of `reduction` standard-normal products (inputs exact in the reference): error ~
    # sqrt(R) * 2^-24 * |y|, and the GEMM's bound 5e-6 * R (10-20x margin there) holds here too.
    kind = "depthwise_nhwc_hwc" if layer.depthwise else "conv2d_nhwc_hwcf"
    return ReferenceSpec(module="conv.iree_reference", function=f"{kind}_s{layer.stride}",
                         atol=5e-6 * reduction(layer), rtol=1e-5)


def flops(layer: Layer, n: int) -> int:
    return 2 * n * layer.out_hw * layer.out_hw * layer.f * reduction(layer)


def bytes_moved(layer: Layer, n: int, item_bytes: int) -> int:
    x = n * layer.in_hw * layer.in_hw * layer.c
    w = layer.k * layer.k * layer.c * (1 if layer.depthwise else layer.f)
    return item_bytes * (x + w) + 4 * n * layer.out_hw * layer.out_hw * layer.f


def case(layer: Layer, n: int, kind: tuple[str, str, int], targets: tuple[str, ...]) -> KernelCase:
    elem, dtype, item_bytes = kind
    return KernelCase(
        case_id=CaseId(family="conv", name=layer.name, shape=layer.label(n), dtype=dtype, impl="iree"),
        model=layer.model,
        targets=targets,
        tensors=tensors(layer, n, dtype),
        arguments=("x", "w"),
        results=("y",),
        reference=reference(layer),
        flops=flops(layer, n),
        bytes=bytes_moved(layer, n, item_bytes),
        make_source=partial(make_source, layer, n, elem),
        source_files=("conv/iree_cases.py", "conv/iree_reference.py", "iree_targets.py"),
    )


def cases() -> list[KernelCase]:
    return [
        *(case(layer, 1, F32, CPU) for layer in LAYERS),
        *(case(layer, 1, F16, MOBILE_GPU) for layer in LAYERS),
        *(case(layer, 32, F16, SERVER_GPU) for layer in LAYERS),
    ]
