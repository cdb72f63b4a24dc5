"""Vendor control for convolution: PyTorch's conv2d on channels_last bf16 tensors (cuDNN, its
heuristics choosing the algorithm: the same in every job), on the Triton cases' shapes, tensors and
reference. Impl `vendor`; nothing compiled."""

from __future__ import annotations

from pipeline.build.suite_api import KernelCase, TorchSource

from .triton_cases import SHAPES, Shape, bytes_moved, case_id, flops, reference, tensors

TARGETS = ("cuda:*",)


def source(shape: Shape) -> TorchSource:
    ly = shape.layer
    return TorchSource(op="conv2d", params={"stride": ly.stride, "padding": ly.pad,
                                            "groups": ly.c if ly.depthwise else 1})


def case(shape: Shape) -> KernelCase:
    return KernelCase(
        case_id=case_id(shape, "vendor"),
        model=shape.layer.model,
        targets=TARGETS,
        tensors=tensors(shape),
        arguments=("x", "w"),
        results=("y",),
        reference=reference(shape),
        flops=flops(shape),
        bytes=bytes_moved(shape),
        make_source=lambda target: source(shape),
        source_files=("conv/vendor_cases.py", "conv/triton_cases.py", "conv/reference.py"),
    )


def cases() -> list[KernelCase]:
    return [case(shape) for shape in SHAPES]
