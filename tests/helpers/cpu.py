"""This host's CPU as an agent sees it, for the tests that run the small x86_64 GEMM suite on it."""

from __future__ import annotations

import pytest

from pipeline.agents.devices import LocalDevice, cpu_device


def x86_64_cpu() -> LocalDevice:
    """This host's CPU device; the test is skipped where it does not run llvm-cpu:x86_64 code."""
    found = cpu_device()
    if found is None or found.device_class.targets != ["llvm-cpu:x86_64"]:
        pytest.skip("needs an x86_64 host")
    return found
