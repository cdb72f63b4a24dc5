"""Vendor control for attention: PyTorch's scaled_dot_product_attention (the backend PyTorch's own
dispatch picks on the agent, the same in every job), causal for prefill, GQA through `enable_gqa`, on
the Triton cases' shapes, tensors and reference. Impl `vendor`; nothing compiled."""

from __future__ import annotations

from math import sqrt

from pipeline.build.suite_api import KernelCase, TorchSource
from pipeline.contracts.ids import CaseId

from .triton_cases import SHAPES, Shape, bytes_moved, flops, reference, tensors

TARGETS = ("cuda:*",)


def source(shape: Shape) -> TorchSource:
    return TorchSource(op="sdpa", params={"is_causal": shape.causal, "scale": 1.0 / sqrt(shape.head_dim),
                                          "enable_gqa": shape.h_q != shape.h_kv})


def case(shape: Shape) -> KernelCase:
    return KernelCase(
        case_id=CaseId(family="attention", name=shape.name, shape=shape.label, dtype="bf16", impl="vendor"),
        model=shape.model,
        targets=TARGETS,
        tensors=tensors(shape),
        arguments=("q", "k", "v"),
        results=("o",),
        reference=reference(shape),
        flops=flops(shape),
        bytes=bytes_moved(shape),
        make_source=lambda target: source(shape),
        source_files=("attention/vendor_cases.py", "attention/triton_cases.py", "attention/reference.py"),
    )


def cases() -> list[KernelCase]:
    return [case(shape) for shape in SHAPES]
