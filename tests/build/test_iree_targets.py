"""iree-compile flags for every GPU target the suite builds for, checked with the real compiler."""

from __future__ import annotations

import pytest

from pipeline.build.iree_compiler import compile_iree, is_supported, target_flags
from pipeline.build.suite_api import IreeSource
from pipeline.contracts import Target

GPU_TARGETS = ("vulkan:valhall", "vulkan:adreno", "hip:gfx942", "hip:gfx950", "hip:gfx1250", "cuda:sm_80")

MATMUL_F16 = """\
func.func @mm(%a: tensor<16x32xf16>, %b: tensor<32x16xf16>) -> tensor<16x16xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x16xf32>
  %c0 = linalg.fill ins(%zero : f32) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %c = linalg.matmul ins(%a, %b : tensor<16x32xf16>, tensor<32x16xf16>) outs(%c0 : tensor<16x16xf32>) -> tensor<16x16xf32>
  return %c : tensor<16x16xf32>
}
"""


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_gpu_targets_compile(target: str) -> None:
    parsed = Target.parse(target)
    artifact = compile_iree(IreeSource(mlir=MATMUL_F16, entry_point="mm"), parsed)
    assert artifact.stats.binary_bytes == len(artifact.data) > 0
    backend = {"vulkan": "vulkan", "hip": "hip", "cuda": "cuda"}[parsed.backend]
    assert f"--iree-hal-target-device={backend}" in artifact.stats.flags
    assert any(flag.endswith(f"-target={parsed.arch}") for flag in artifact.stats.flags)


def test_known_and_unknown_chips() -> None:
    assert target_flags(Target.parse("hip:gfx942")) == ["--iree-hal-target-device=hip", "--iree-rocm-target=gfx942"]
    assert target_flags(Target.parse("cuda:sm_86")) == ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_86"]
    assert not is_supported(Target.parse("cuda:sm_90")) and not is_supported(Target.parse("vulkan:mali-g77"))
