"""What a kernel suite declares, and nothing more: the builder's input, never run at declaration.

A suite is a folder in a git checkout (this repository's `kernels/` by default) whose
`__init__.py` defines `cases() -> list[KernelCase]`, listing its families explicitly. It is loaded
from a checkout *at a commit* by path (`pipeline.build.suite_loader`), never imported as an
installed package. Case ids must stay stable across commits: they key every series.

Rules a suite follows (the builder and the agents rely on them):
- package `__init__` files import no compiler: a case hands back compiler *input* (`make_source`);
- a reference module (`ReferenceSpec.module`, e.g. `gemm.reference`) imports nothing but NumPy:
  agents load that one file alone from the bundle's `suite/` copy, without the package around it;
- a reference function takes the argument arrays (NumPy, in `arguments` order, as the kernel gets
  them) and returns the expected results (one array, or a tuple in `results` order), ideally in
  float64; the agent compares with `|out - ref| <= atol + rtol * |ref|`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.contracts.ids import CaseId, Target
from pipeline.contracts.manifest import ReferenceSpec, TensorSpec


@dataclass(frozen=True)
class IreeSource:
    """An IREE implementation's compiler input for one target: MLIR text and extra flags."""

    mlir: str
    entry_point: str
    flags: tuple[str, ...] = ()


KernelSource = IreeSource  # Triton sources join this union with the suite issue.


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
