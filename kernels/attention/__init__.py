"""Attention forward, bf16: the Triton flash-attention kernels (`triton_cases.py`) and their vendor
control, PyTorch's scaled_dot_product_attention (`vendor_cases.py`), over the same shapes."""

from __future__ import annotations

from pipeline.build.suite_api import KernelCase

from . import triton_cases, vendor_cases


def cases() -> list[KernelCase]:
    return [*triton_cases.cases(), *vendor_cases.cases()]
