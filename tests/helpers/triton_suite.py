"""A small Triton GEMM suite for tests: the real kernel (`kernels/gemm/triton_kernel.py`) with
variants made by its launch alone, so no second kernel has to be kept in step.

Variants: "ok"; "wrong" (K passed 16 short: the last 16 products of every dot are missing, and
the kernel compiles and runs); "unwritten" (the grid one program short: the last tile of C is never
written, so only the runner's NaN poison can catch it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

SUITE = "kernels"
KERNELS = Path(__file__).resolve().parents[2] / "kernels" / "gemm"

Variant = Literal["ok", "wrong", "unwritten"]


@dataclass(frozen=True)
class TritonCase:
    name: str
    m: int = 256
    n: int = 256
    k: int = 256
    variant: Variant = "ok"


_INIT = '''\
"""A small Triton GEMM suite for tests."""
from pipeline.build.suite_api import KernelCase, Pointer, Scalar, TritonSource
from pipeline.contracts.ids import CaseId
from pipeline.contracts.manifest import ReferenceSpec, TensorSpec

CASES = {cases!r}
BLOCK = {block}


def source(m, n, k, variant):
    programs = (m // BLOCK) * (n // BLOCK) - (1 if variant == "unwritten" else 0)
    k_passed = k - 16 if variant == "wrong" else k
    return TritonSource(
        module="triton_kernel", function="matmul_kernel",
        args={{
            "a_ptr": Pointer("a", "bf16"), "b_ptr": Pointer("b", "bf16"), "c_ptr": Pointer("c", "bf16"),
            "M": Scalar(m), "N": Scalar(n), "K": Scalar(k_passed),
            "stride_am": Scalar(k), "stride_ak": Scalar(1), "stride_bk": Scalar(n), "stride_bn": Scalar(1),
            "stride_cm": Scalar(n), "stride_cn": Scalar(1),
        }},
        constexprs={{"BLOCK_M": BLOCK, "BLOCK_N": BLOCK, "BLOCK_K": BLOCK, "GROUP_M": 8}},
        grid=(programs,), num_warps=4, num_stages=3,
    )


def case(name, m, n, k, variant):
    return KernelCase(
        case_id=CaseId(family="gemm", name=name, shape=f"{{m}}x{{n}}x{{k}}", dtype="bf16", impl="triton"),
        model="test",
        targets={targets!r},
        tensors=(
            TensorSpec(name="a", role="input", shape=[m, k], dtype="bf16"),
            TensorSpec(name="b", role="input", shape=[k, n], dtype="bf16"),
            TensorSpec(name="c", role="output", shape=[m, n], dtype="bf16", init="none"),
        ),
        arguments=("a", "b"),
        results=("c",),
        reference=ReferenceSpec(module="reference", function="matmul", atol=1e-2, rtol=1e-2),
        flops=2 * m * n * k,
        bytes=2 * (m * k + k * n + m * n),
        make_source=lambda target, m=m, n=n, k=k, variant=variant: source(m, n, k, variant),
    )


def cases():
    return [case(*c) for c in CASES]
'''


def triton_suite_files(cases: Sequence[TritonCase], *, suite: str = SUITE, block: int = 64,
                       targets: Sequence[str] = ("cuda:sm_90",)) -> dict[str, str]:
    """Files (relative to the repository root) of a suite folder holding the given Triton GEMM cases,
    tiled `block` x `block` (a change of it changes registers, binary and shared memory), for `targets`
    (cuda:sm_90 runs on an H100/H200 agent; hip targets build only)."""
    rows = [(c.name, c.m, c.n, c.k, c.variant) for c in cases]
    return {
        f"{suite}/__init__.py": _INIT.format(cases=rows, block=block, targets=tuple(targets)),
        f"{suite}/triton_kernel.py": (KERNELS / "triton_kernel.py").read_text(),
        f"{suite}/reference.py": (KERNELS / "reference.py").read_text(),
    }


def triton_case_id(case: TritonCase) -> str:
    return f"gemm/{case.name}/{case.m}x{case.n}x{case.k}/bf16/triton"
