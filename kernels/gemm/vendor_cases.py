"""Vendor control for the bf16 GEMM: torch.matmul (cuBLAS) into a poisoned C, on the Triton cases'
shapes, tensors and reference. Impl `vendor`; nothing compiled."""

from __future__ import annotations

from pipeline.build.suite_api import KernelCase, TorchSource
from pipeline.contracts.ids import CaseId

from .triton_cases import SHAPES, Shape, bytes_moved, flops, reference, tensors

TARGETS = ("cuda:*",)


def case(shape: Shape) -> KernelCase:
    return KernelCase(
        case_id=CaseId(family="gemm", name=shape.name, shape=shape.label, dtype="bf16", impl="vendor"),
        model=shape.model,
        targets=TARGETS,
        tensors=tensors(shape),
        arguments=("a", "b"),
        results=("c",),
        reference=reference(shape),
        flops=flops(shape),
        bytes=bytes_moved(shape),
        make_source=lambda target: TorchSource(op="matmul"),
        source_files=("gemm/vendor_cases.py", "gemm/triton_cases.py", "gemm/reference.py"),
    )


def cases() -> list[KernelCase]:
    return [case(shape) for shape in SHAPES]
