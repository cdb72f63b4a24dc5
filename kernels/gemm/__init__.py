"""GEMM, C[M, N] = A[M, K] @ B[K, N]: through IREE for CPUs and GPUs (`iree_cases.py`: f32 on CPUs,
f16 on GPUs) and in Triton for `cuda:sm_90` (`triton_cases.py`, kernel in `triton_kernel.py`).
"""

from __future__ import annotations

from pipeline.build.suite_api import KernelCase

from . import iree_cases, triton_cases
from .iree_cases import TILES, Tile   # the CPU tile knob, re-exported where it always was

__all__ = ["cases", "TILES", "Tile"]


def cases() -> list[KernelCase]:
    return [*iree_cases.cases(), *triton_cases.cases()]
