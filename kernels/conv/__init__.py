"""Convolution forward, NHWC bf16: the Triton kernels (`triton_cases.py`: implicit GEMM, depthwise) and
their vendor control, PyTorch's conv2d through cuDNN (`vendor_cases.py`), over the same layers."""

from __future__ import annotations

from pipeline.build.suite_api import KernelCase

from . import triton_cases, vendor_cases


def cases() -> list[KernelCase]:
    return [*triton_cases.cases(), *vendor_cases.cases()]
