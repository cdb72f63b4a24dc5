"""The benchfarm kernel suite: every family listed here, explicitly.

Loaded by path at a commit (`pipeline.build.suite_loader.load_suite`) under a private module name,
never imported as `kernels`. Imports stay relative, and nothing here imports a compiler: a family
hands back compiler *input* (text and flags) and the builder compiles it.
"""

from __future__ import annotations

from pipeline.build.suite_api import KernelCase

from . import attention, conv, gather_scatter, gemm
from .attention import iree_cases as attention_iree
from .conv import iree_cases as conv_iree
from .gemm import vendor_cases as gemm_vendor


def cases() -> list[KernelCase]:
    return [*gemm.cases(), *gemm_vendor.cases(), *attention.cases(), *conv.cases(),
            *attention_iree.cases(), *conv_iree.cases(), *gather_scatter.cases()]
