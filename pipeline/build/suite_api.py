"""What a kernel suite declares, and nothing more: the builder's input, never run at declaration.

A suite is a folder in a git checkout (this repository's `kernels/` by default) whose
`__init__.py` defines `cases() -> list[KernelCase]`, listing its families explicitly. It is loaded
from a checkout *at a commit* by path (`pipeline.build.suite_loader`), never imported as an
installed package. Case ids must stay stable across commits: they key every series.

Rules a suite follows (the builder and the agents rely on them):
- package `__init__` files import no compiler: a case hands back compiler *input* (`make_source`);
  a Triton kernel lives in a module of its own that only the builder's compile worker imports
  (`TritonSource.module`, loaded by path like a reference, so it may import triton and nothing
  from the suite);
- a reference module (`ReferenceSpec.module`, e.g. `gemm.reference`) imports nothing but NumPy:
  agents load that one file alone from the bundle's `suite/` copy, without the package around it;
- a reference function takes the argument arrays (NumPy, in `arguments` order, as the kernel gets
  them) and returns the expected results (one array, or a tuple in `results` order), ideally in
  float64; the agent compares with `|out - ref| <= atol + rtol * |ref|`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from pipeline.contracts.ids import CaseId, Target
from pipeline.contracts.manifest import ReferenceSpec, TensorSpec


@dataclass(frozen=True)
class IreeSource:
    """An IREE implementation's compiler input for one target: MLIR text and extra flags."""

    mlir: str
    entry_point: str
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pointer:
    """A kernel parameter bound to one of the case's tensors: its device pointer."""

    tensor: str                                  # TensorSpec name
    dtype: str                                   # Triton element type, e.g. "bf16" (signature "*bf16")


@dataclass(frozen=True)
class Scalar:
    """A scalar kernel parameter whose value is known when the case is declared (a size, a stride).

    The builder specializes it as Triton's JIT would: a value of 1 becomes a compile-time constant
    (and leaves the kernel's parameter list), a multiple of 16 gets a divisibility hint.
    """

    value: int | float
    dtype: Literal["i32", "i64", "fp32"] = "i32"


@dataclass(frozen=True)
class TritonSource:
    """A Triton implementation's compiler input: a @triton.jit function named by module and name.

    `module` is a suite module (e.g. `gemm.triton_kernel`) that the compile worker loads by path
    from the exported suite, like a reference module: it may import triton, not the rest of the
    suite. `args` binds every non-constexpr parameter, in the kernel's order; `constexprs` the
    compile-time ones. `grid` is the launch grid for this case's shape (precomputed: one case, one
    shape). Pointers are assumed 16-byte aligned (the runner allocates them so).
    """

    module: str
    function: str
    args: Mapping[str, Pointer | Scalar]
    constexprs: Mapping[str, int | float | bool]
    grid: tuple[int, ...]
    num_warps: int = 4
    num_stages: int = 3


@dataclass(frozen=True)
class TorchSource:
    """A vendor control (impl `vendor`): the PyTorch operator an agent with torch and CUDA calls on the
    case's tensors (cuBLAS, cuDNN, SDPA). Nothing is compiled; the bundle entry records the call
    (`LaunchSpec.torch`) and `pipeline.agents.runners.torch_runner` knows each operator."""

    op: Literal["matmul", "sdpa", "conv2d", "index_select", "index_add"]
    params: Mapping[str, int | float | bool | str] = field(default_factory=dict)


KernelSource = IreeSource | TritonSource | TorchSource


@dataclass(frozen=True)
class KernelCase:
    """One benchmark case: identity, tensors, reference, roofline counts and how to make its source."""

    case_id: CaseId
    model: str                                   # the model the shape comes from, e.g. "Llama-3-8B"
    targets: tuple[str, ...]                     # target patterns this implementation supports
    tensors: tuple[TensorSpec, ...]
    arguments: tuple[str, ...]                   # tensor names passed, in order
    results: tuple[str, ...]                     # tensor names returned, in order
    reference: ReferenceSpec                     # suite module:function computing the expected results
    flops: int
    bytes: int
    make_source: Callable[[Target], KernelSource]
    source_files: tuple[str, ...] = field(default=())  # suite-relative files that define this kernel

    def supports(self, target: Target) -> bool:
        return any(fnmatch.fnmatchcase(str(target), pattern) for pattern in self.targets)
