"""Which targets an IREE case is built for, and what element type it computes in there.

IREE compiles one MLIR function for every backend the builder knows (`pipeline.build.iree_compiler`):
CPUs (x86_64 servers, Android phones) compute in f32; GPUs (phone GPUs through Vulkan, AMD through
HIP, NVIDIA through CUDA) take f16 inputs and accumulate in f32. CUDA targets stop at sm_89:
iree-compile 3.13 has no sm_90, and sm_80 code runs on Hopper through PTX.
"""

from __future__ import annotations

from pipeline.contracts.ids import Target

CPU = ("llvm-cpu:*",)
MOBILE_GPU = ("vulkan:*",)
SERVER_GPU = ("hip:*", "cuda:sm_8?")
GPU = (*MOBILE_GPU, *SERVER_GPU)


def is_llvm_cpu(target: Target) -> bool:
    return target.backend == "llvm-cpu"


def is_vulkan(target: Target) -> bool:
    return target.backend == "vulkan"


# (MLIR element type, TensorSpec dtype, bytes per element) of the inputs, per device kind.
F32 = ("f32", "f32", 4)
F16 = ("f16", "f16", 2)
