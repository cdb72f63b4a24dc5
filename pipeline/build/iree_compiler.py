"""Compile an IreeSource for a Target with `iree-compile` (the binary of the iree.compiler package).

Only the builder imports this module; agents run the resulting .vmfb with the IREE runtime.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from functools import lru_cache
from pathlib import Path

from pipeline.build import disassembly
from pipeline.build.compiled import CompiledArtifact, CompileError, UnsupportedTarget
from pipeline.build.suite_api import IreeSource
from pipeline.contracts import CompileStats, Target

__all__ = [
    "COMPILER", "CompiledArtifact", "CompileError", "UnsupportedTarget", "compile_iree", "compile_flags",
    "compiler_version", "is_supported", "target_flags", "cpu_level",
]

COMPILER = "iree-compile"
COMPILE_TIMEOUT_S = 600
STDERR_TAIL_CHARS = 4000

# llvm-cpu arch -> LLVM target triple.
_TRIPLES = {
    "x86_64": "x86_64-linux-gnu",
    "aarch64": "aarch64-linux-gnu",
    "aarch64-android": "aarch64-none-linux-android34",
}

# GPU backends: target backend -> (HAL device, the flag naming the chip, the chips iree-compile 3.13
# knows). CUDA: sm_90 is rejected ("missing GPU target"); sm_80 code runs on Hopper through PTX, so
# a Hopper device class lists `cuda:sm_80` for its IREE cases. HIP's chip flag is still
# `--iree-rocm-target` in 3.13 (`--iree-hip-target` does not exist).
_GPU = {
    "vulkan": ("vulkan", "--iree-vulkan-target", ("valhall", "adreno")),
    "hip": ("hip", "--iree-rocm-target", ("gfx942", "gfx950", "gfx1250")),
    "cuda": ("cuda", "--iree-cuda-target", ("sm_80", "sm_86", "sm_89")),
}


def cpu_level(target: Target) -> str:
    """The CPU the code is tuned for and may assume; portable, never the builder's own (`host`).

    x86_64 -> `x86-64-v3` (AVX2, FMA, BMI2: every x86 server since Haswell/Zen 1). v4 would add
    AVX-512 and crash with SIGILL on AMD Zen 1-3 and Intel client cores; `host` would make a
    bundle depend on which builder compiled it. aarch64 -> `generic` (ARMv8-A baseline).
    """
    return "x86-64-v3" if target.arch == "x86_64" else "generic"


def is_supported(target: Target) -> bool:
    if target.backend == "llvm-cpu":
        return target.arch in _TRIPLES
    return target.backend in _GPU and target.arch in _GPU[target.backend][2]


def target_flags(target: Target) -> list[str]:
    if not is_supported(target):
        raise UnsupportedTarget(f"no IREE flags known for target {target}")
    if target.backend in _GPU:
        device, chip_flag, _ = _GPU[target.backend]
        return [f"--iree-hal-target-device={device}", f"{chip_flag}={target.arch}"]
    return [
        "--iree-hal-target-device=local",
        "--iree-hal-local-target-device-backends=llvm-cpu",
        f"--iree-llvmcpu-target-triple={_TRIPLES[target.arch]}",
        f"--iree-llvmcpu-target-cpu={cpu_level(target)}",
    ]


@lru_cache(maxsize=1)
def compiler_binary() -> str:
    from iree.compiler.tools.binaries import find_tool  # the builder's dependency only

    return str(find_tool(COMPILER))


@lru_cache(maxsize=1)
def compiler_version() -> str:
    """e.g. `3.13.0rc20261016 @ 89ece87b...` (the full build id: it keys the compile cache)."""
    out = subprocess.run([compiler_binary(), "--version"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "IREE compiler version" in line:
            return line.split("IREE compiler version", 1)[1].strip()
    raise CompileError(f"cannot read the version from `{COMPILER} --version`: {out!r}")


def compile_flags(source: IreeSource, target: Target) -> list[str]:
    return [*target_flags(target), *source.flags]


def compile_iree(source: IreeSource, target: Target, *, timeout_s: float = COMPILE_TIMEOUT_S) -> CompiledArtifact:
    """Compile `source` for `target`; raise CompileError with the compiler's stderr tail on failure."""
    flags = compile_flags(source, target)
    with tempfile.TemporaryDirectory(prefix="benchfarm-iree-") as tmp:
        src, out = Path(tmp) / "kernel.mlir", Path(tmp) / "kernel.vmfb"
        src.write_text(source.mlir)
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                [compiler_binary(), str(src), *flags, "-o", str(out)],
                capture_output=True, text=True, timeout=timeout_s, check=False,
            )
        except subprocess.TimeoutExpired:
            raise CompileError(f"{COMPILER} timed out after {timeout_s:.0f} s for {target}") from None
        elapsed = time.perf_counter() - start
        if proc.returncode != 0 or not out.is_file():
            tail = proc.stderr.replace(str(src), "kernel.mlir")[-STDERR_TAIL_CHARS:]
            raise CompileError(f"{COMPILER} failed for {target} (exit {proc.returncode}):\n{tail}")
        data = out.read_bytes()
    stats = CompileStats(
        compiler=COMPILER, compiler_version=compiler_version(), compile_time_s=elapsed,
        binary_bytes=len(data), flags=flags,
    )
    code = disassembly.from_vmfb(data, target)
    return CompiledArtifact(data=data, stats=stats, launch={"entry_point": source.entry_point}, code=code.code,
                            listing=code.listing)
