"""Compile a TritonSource ahead of time, on a CPU-only builder, for `cuda:sm_XX` and `hip:gfxNNN`.

`triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", 90, 32))`
needs no GPU: Triton lowers to PTX and runs its bundled ptxas. The artifact is the cubin; agents
load it with the CUDA driver API (`pipeline.agents.runners.cuda_runner`) and never need Triton.
AMD targets (`GPUTarget("hip", "gfx942", 64)`) compile the same way to an hsaco (Triton's bundled
LLVM and lld); no agent runs those yet, so they are build-only: compile statistics are tracked.

Specialization follows Triton's JIT, so the AOT kernel is the one a JIT launch would get: a scalar
equal to 1 becomes a constant and leaves the parameter list; pointers (the runner allocates them
256-byte aligned) and multiples of 16 get a divisibility hint (`tt.divisibility`), which is what
lets Triton vectorize loads and pipeline them.

Only the builder imports this module, and it imports triton only inside the compile.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.metadata
import io
import re
import struct
import tempfile
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from pipeline.build import disassembly
from pipeline.build.compiled import CompiledArtifact, CompileError, UnsupportedTarget
from pipeline.build.suite_api import Pointer, Scalar, TritonSource
from pipeline.build.suite_loader import load_suite_module
from pipeline.contracts import CompileStats, Target

__all__ = [
    "COMPILER", "compile_triton", "compiler_version", "is_supported", "cuda_capability", "amd_arch", "is_wave32",
    "warp_size", "source_material",
    "source_launch", "specialize",
]

COMPILER = "triton"
WARP_SIZE = 32
DIVISIBILITY = 16
ERROR_TAIL_CHARS = 4000

_SM = re.compile(r"^sm_(\d+)a?$")
_GFX = re.compile(r"^gfx(\d+)[0-9a-f]{2}$")
_REGISTERS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_AMD_VGPRS = re.compile(r"\.[av]gpr_count:\s+(\d+)")
_AMD_SPILLS = re.compile(r"\.[sv]gpr_spill_count:\s+(\d+)")


def cuda_capability(target: Target) -> int | None:
    """90 for `cuda:sm_90` (and `cuda:sm_90a`); None for anything that is not a CUDA target."""
    match = _SM.match(target.arch) if target.backend == "cuda" else None
    return int(match.group(1)) if match else None


def amd_arch(target: Target) -> str | None:
    """"gfx942" for `hip:gfx942`; None for anything that is not an AMD GPU target."""
    return target.arch if target.backend == "hip" and _GFX.match(target.arch) else None


def is_wave32(arch: str) -> bool:
    """RDNA-style AMD GPUs run 32-wide waves: gfx10xx, gfx11xx and gfx12xx, gfx1250 included (Triton
    3.9 sets warp_size = 32 for gfx major >= 10 whatever GPUTarget says). CDNA (gfx942, gfx950) is 64."""
    match = _GFX.match(arch)
    return match is not None and int(match.group(1)) >= 10


def warp_size(target: Target) -> int:
    """Threads per warp (wave) on `target`: 32 on NVIDIA and wave32 AMD, 64 on CDNA."""
    arch = amd_arch(target)
    return 64 if arch is not None and not is_wave32(arch) else WARP_SIZE


def is_supported(target: Target) -> bool:
    return cuda_capability(target) is not None or amd_arch(target) is not None


@lru_cache(maxsize=1)
def compiler_version() -> str | None:
    """The installed triton's version (read without importing it), or None where it is absent."""
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return None


# ---- specialization: what the kernel's parameter list becomes ---------------------------------

def specialize(source: TritonSource) -> tuple[dict[str, str], dict[str, Any], list[str], list[dict[str, Any]]]:
    """(signature, constexprs, hinted args, launch parameters) for `source`, as Triton's JIT would.

    The signature maps every non-constexpr argument to its Triton type (`*bf16`, `i32`), the
    constexprs add the scalars equal to 1, hinted args are those with a divisibility-16 hint, and
    the launch parameters are what stays in the compiled kernel's parameter list, in order.
    """
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = dict(source.constexprs)
    hinted: list[str] = []
    params: list[dict[str, Any]] = []
    for name, arg in source.args.items():
        if isinstance(arg, Pointer):
            signature[name] = f"*{arg.dtype}"
            hinted.append(name)
            params.append({"name": name, "tensor": arg.tensor})
        elif isinstance(arg, Scalar):
            if isinstance(arg.value, int) and not isinstance(arg.value, bool) and arg.value == 1:
                constexprs[name] = 1
                continue
            signature[name] = arg.dtype
            if isinstance(arg.value, int) and arg.value % DIVISIBILITY == 0:
                hinted.append(name)
            params.append({"name": name, "dtype": arg.dtype, "value": arg.value})
        else:
            raise CompileError(f"argument {name}: {type(arg).__name__} is neither Pointer nor Scalar")
    return signature, constexprs, hinted, params


def _kernel_file(suite_dir: Path, module: str) -> Path:
    path = Path(suite_dir).joinpath(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        raise CompileError(f"Triton kernel module {module} not found in the suite ({path.name})")
    return path


def _function_text(file_text: str, function: str) -> str:
    for node in ast.walk(ast.parse(file_text)):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return ast.get_source_segment(file_text, node, padded=True) or ""
    raise CompileError(f"no function {function} in the Triton kernel module")


def source_material(source: TritonSource, suite_dir: Path) -> dict[str, Any]:
    """What identifies the compile's input, for the cache key: the kernel's source text, a digest of
    its whole module file (helpers it calls live there too), and every specialization value."""
    file_text = _kernel_file(suite_dir, source.module).read_text()
    signature, constexprs, hinted, _ = specialize(source)
    return {
        "module": source.module, "function": source.function,
        "function_source": _function_text(file_text, source.function),
        "module_sha256": hashlib.sha256(file_text.encode()).hexdigest(),
        "signature": signature, "constexprs": {k: repr(v) for k, v in constexprs.items()}, "hinted": hinted,
        "num_warps": source.num_warps, "num_stages": source.num_stages,
    }


def source_launch(source: TritonSource) -> dict[str, Any]:
    """The launch facts that come from the source, not the compile: the grid and the parameters with
    their values. Sources that differ only in these (same shape class, other sizes) share a cubin,
    so a cached compile supplies the rest (entry point, threads, shared bytes, null pointers)."""
    return {"grid": list(source.grid), "parameters": specialize(source)[3]}


def compile_options(source: TritonSource) -> dict[str, Any]:
    return {"num_warps": source.num_warps, "num_stages": source.num_stages, "enable_fp_fusion": True}


# ---- reading the compiled kernel ---------------------------------------------------------------

def _ptx_param_count(ptx: str, name: str) -> int:
    match = re.search(rf"\.entry\s+{re.escape(name)}\s*\((.*?)\)", ptx, re.S)
    if match is None:
        raise CompileError(f"entry {name} not found in the PTX")
    return len(re.findall(r"\.param\s", match.group(1)))


def _cubin_registers(cubin: bytes, name: str) -> int | None:
    """Registers per thread from the cubin itself: the `.text.<name>` section's sh_info >> 24."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:   # 64-bit ELF only
        return None
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections: list[tuple[int, ...]] = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    strtab_offset = sections[shstrndx][4]
    wanted = f".text.{name}".encode()
    for sh_name, _type, _flags, _addr, _offset, _size, _link, info, _align, _entsize in sections:
        start = strtab_offset + sh_name
        if cubin[start:cubin.index(b"\0", start)] == wanted:
            return info >> 24
    return None


def _llir_param_count(llir: str, name: str) -> int:
    """Parameters of `define ... @name(ptr addrspace(1) %0, i32 %1, ...)`: top-level commas + 1."""
    match = re.search(rf"define\s[^@]*@{re.escape(name)}\(", llir)
    if match is None:
        raise CompileError(f"kernel {name} not found in the LLVM IR")
    depth, count, empty = 1, 1, True
    for char in llir[match.end():]:
        if char in "()":
            depth += 1 if char == "(" else -1
            if depth == 0:
                break
        elif char == "," and depth == 1:
            count += 1
        elif not char.isspace():
            empty = False
    return 0 if empty else count


def _amdgcn_figures(amdgcn: str) -> tuple[int | None, int | None]:
    """(vector registers per lane, AGPRs included; spilled SGPRs + VGPRs) from the code object's metadata."""
    vgprs = [int(n) for n in _AMD_VGPRS.findall(amdgcn)]
    spills = [int(n) for n in _AMD_SPILLS.findall(amdgcn)]
    return (sum(vgprs) if vgprs else None, sum(spills) if spills else None)


def _ptxas_figures(log: str) -> tuple[int | None, int | None]:
    registers = _REGISTERS.search(log)
    spills = _SPILLS.search(log)
    return (
        int(registers.group(1)) if registers else None,
        int(spills.group(1)) + int(spills.group(2)) if spills else None,
    )


# ---- the compile ------------------------------------------------------------------------------

def compile_triton(source: TritonSource, target: Target, suite_dir: Path) -> CompiledArtifact:
    """Compile `source` (its kernel module read from `suite_dir`) for `target` into a cubin (NVIDIA)
    or an hsaco (AMD).

    Triton's own cache is bypassed (a fresh, temporary cache directory and always-compile): the
    builder's content-addressed cache is the only one, and compile times are real. Line info is
    left out, so the cubin does not depend on where the builder exported the suite.
    """
    capability, arch = cuda_capability(target), amd_arch(target)
    if capability is None and arch is None:
        raise UnsupportedTarget(f"Triton builds here only for cuda:sm_XX and hip:gfxNNN targets, not {target}")
    try:
        import triton
        from triton import knobs
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction
    except ImportError as exc:
        raise CompileError(f"triton is not installed in this builder: {exc}") from None

    try:
        module = load_suite_module(suite_dir, source.module)
    except Exception as exc:
        raise CompileError(f"loading Triton kernel module {source.module} failed: {exc}") from None
    fn = getattr(module, source.function, None)
    if fn is None or not hasattr(fn, "arg_names"):
        raise CompileError(f"{source.module}.{source.function} is not a @triton.jit function")
    signature, constexprs, hinted, params = specialize(source)
    declared = [*source.args, *source.constexprs]
    if sorted(declared) != sorted(fn.arg_names) or list(source.args) != [a for a in fn.arg_names if a in source.args]:
        raise CompileError(
            f"{source.function}({', '.join(fn.arg_names)}): args (in the kernel's order) and constexprs "
            f"must name every parameter once; got args {list(source.args)}, constexprs {list(source.constexprs)}"
        )
    full_signature = {name: signature.get(name, "constexpr") for name in fn.arg_names}
    attrs = {(fn.arg_names.index(name),): [["tt.divisibility", DIVISIBILITY]] for name in hinted}

    log = io.StringIO()
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory(prefix="benchfarm-triton-") as cache:
        for group in (knobs.cache, knobs.compilation, knobs.nvidia):
            stack.enter_context(group.scope() if hasattr(group, "scope") else contextlib.nullcontext())
        knobs.cache.dir = cache
        knobs.compilation.always_compile = True
        knobs.compilation.disable_line_info = True
        if hasattr(knobs.nvidia, "dump_ptxas_log"):
            knobs.nvidia.dump_ptxas_log = True       # ptxas -v's report is printed: registers, spills
        start = time.perf_counter()
        try:
            with contextlib.redirect_stdout(log):
                kernel = triton.compile(
                    # a @gluon.jit kernel (e.g. AMD TDM gather/scatter) has its own AST source
                    (GluonASTSource if isinstance(fn, GluonJITFunction) else ASTSource)(fn, full_signature, constexprs, attrs),
                    target=GPUTarget("cuda", capability, WARP_SIZE) if arch is None
                    else GPUTarget("hip", arch, warp_size(target)),
                    options=compile_options(source),
                )
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}\n{log.getvalue()}"
            raise CompileError(f"triton failed for {target}:\n{text[-ERROR_TAIL_CHARS:]}") from None
        elapsed = time.perf_counter() - start

    metadata = kernel.metadata
    scratch = {k: getattr(metadata, k, 0) or 0 for k in ("global_scratch_size", "profile_scratch_size")}
    if any(scratch.values()):
        raise CompileError(f"{source.function} needs scratch memory {scratch}; the CUDA runner passes none yet")
    if arch is None:
        binary: bytes = kernel.asm["cubin"]
        null_pointers = _ptx_param_count(kernel.asm["ptx"], metadata.name) - len(params)
        registers, spills = _ptxas_figures(log.getvalue())
        if registers is None:
            registers = _cubin_registers(binary, metadata.name)
    else:
        binary = kernel.asm["hsaco"]
        null_pointers = _llir_param_count(kernel.asm["llir"], metadata.name) - len(params)
        registers, spills = _amdgcn_figures(kernel.asm["amdgcn"])
    threads = metadata.num_warps * getattr(metadata, "warp_size", warp_size(target))
    version = compiler_version() or triton.__version__
    stats = CompileStats(
        compiler=COMPILER, compiler_version=version, compile_time_s=elapsed, binary_bytes=len(binary),
        registers=registers, spills=spills, shared_bytes=metadata.shared,
        flags=[f"{k}={v}" for k, v in compile_options(source).items()],
    )
    launch = {
        "entry_point": metadata.name, "threads": threads,
        "shared_bytes": metadata.shared, "null_pointers": null_pointers, **source_launch(source),
    }
    code = disassembly.from_cubin(binary) if arch is None else disassembly.from_code_object(binary, arch)
    return CompiledArtifact(data=binary, stats=stats, launch=launch, code=code.code, listing=code.listing)
