"""Gather/scatter: MoE dispatch (row gather by index), MoE combine (scatter-add, or the segmented
sum of each token's top-k rows) and embedding lookup. Through IREE for CPUs and GPUs
(`iree_cases.py`), in Triton for `cuda:sm_90` and AMD (`triton_cases.py`, `triton_kernel.py`), and in
Gluon with gfx1250's Tensor Data Mover gather and scatter (`gluon_kernel.py`, build-only), and
PyTorch's index ops as vendor controls on CUDA (`vendor_cases.py`).
"""

from __future__ import annotations

from pipeline.build.suite_api import KernelCase

from . import iree_cases, triton_cases, vendor_cases


def cases() -> list[KernelCase]:
    return [*iree_cases.cases(), *triton_cases.cases(), *vendor_cases.cases()]
