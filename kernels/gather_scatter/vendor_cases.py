"""Vendor controls for gather/scatter: PyTorch's index ops on the Triton cases' CUDA shapes, tensors
and references (same family, name, shape and dtype, impl `vendor`; nothing compiled).

- dispatch, embedding: `torch.index_select(table, 0, idx, out=out)`;
- combine: `index_add` in its MoE-combine form (`top_k` set): the weighted rows y[pos] * w summed
  into each token's row with `index_add` (token of slot t*K + j is t), fp32 accumulation, as a PyTorch
  MoE layer does it (`pipeline.agents.runners.torch_runner`).
"""

from __future__ import annotations

from pipeline.build.suite_api import KernelCase, TorchSource
from pipeline.contracts.ids import CaseId

from .triton_cases import (
    ARGUMENTS,
    SHAPES,
    Shape,
    bytes_moved,
    flops,
    reference,
    tensors,
)

TARGETS = ("cuda:*",)


def source(shape: Shape) -> TorchSource:
    if shape.op == "combine":
        return TorchSource(op="index_add", params={"dim": 0, "top_k": shape.top_k})
    return TorchSource(op="index_select", params={"dim": 0})


def case(shape: Shape) -> KernelCase:
    return KernelCase(
        case_id=CaseId(family="gather-scatter", name=shape.name, shape=shape.label, dtype="bf16", impl="vendor"),
        model=shape.model,
        targets=TARGETS,
        tensors=tensors(shape),
        arguments=ARGUMENTS[shape.op],
        results=("out",),
        reference=reference(shape),
        flops=flops(shape),
        bytes=bytes_moved(shape),
        make_source=lambda target: source(shape),
        source_files=("gather_scatter/vendor_cases.py", "gather_scatter/triton_cases.py", "gather_scatter/reference.py"),
    )


def cases() -> list[KernelCase]:
    return [case(shape) for shape in SHAPES]
