"""Code-path evidence: an artifact's instructions as a disassembler reads them, normalized so that
only the code counts, with its digest and instruction mix (`CodeEvidence` in the manifest).

Normalized: one instruction per line, whitespace collapsed; addresses, encodings, comments,
directives, and kernel, function and symbol names taken out (each function starts with a line
`function:`), branch targets kept as offsets inside their section. Renaming a kernel changes
nothing; any change of an instruction, an operand or a register changes the digest.

Readers, by what the compiler hands back:
- CUDA cubins (Triton): `cuobjdump -sass` from the Triton wheel (`triton/backends/nvidia/bin/`);
- AMD code objects (Triton): Triton's own GCN assembly stage (`compiled.asm["amdgcn"]`): Debian's
  LLVM cannot disassemble every chip the builder targets (gfx1250);
- IREE llvm-cpu modules: the ELF objects embedded in the .vmfb, disassembled by `llvm-objdump`;
- anything else (IREE's SPIR-V, PTX and HIP modules): unavailable, with the reason.

Classes (`InstructionMix`) by opcode. On CPUs every memory operand (stack included) is a global load
or store, and MMA means matrix units only (AMX tile products, SME outer products), not vector FMAs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import shutil
import struct
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pipeline.contracts import CodeEvidence, InstructionMix, Target
from pipeline.contracts.manifest import INSTRUCTION_CLASSES

__all__ = [
    "LISTINGS_DIR", "Disassembly", "from_amdgcn", "from_cubin", "from_vmfb", "normalize_amdgcn",
    "normalize_objdump", "normalize_sass", "tools_identity", "unavailable",
]

LISTINGS_DIR = "code"
NORMALIZATION = 1
"""Bumped whenever the normalization or the classes change: it keys the compile cache."""
FUNCTION = "function:"
TOOL_TIMEOUT_S = 120


@dataclass(frozen=True)
class Disassembly:
    """What the manifest says of an artifact's code, and the listing it says it of ("" when none)."""

    code: CodeEvidence
    listing: str = ""


def unavailable(reason: str) -> Disassembly:
    return Disassembly(CodeEvidence(tool="", unavailable=reason))


def _evidence(lines: list[str], opcodes: Iterable[str], classify: Callable[[str, str], str], tool: str) -> Disassembly:
    """The evidence of a normalized listing; `opcodes` pairs each instruction line with its opcode."""
    listing = "".join(f"{line}\n" for line in lines)
    digest = hashlib.sha256(listing.encode()).hexdigest()
    counts = Counter(classify(op, line) for op, line in opcodes)
    mix = InstructionMix(total=sum(counts.values()), by_class={c: counts.get(c, 0) for c in INSTRUCTION_CLASSES})
    return Disassembly(CodeEvidence(tool=tool, digest=digest, listing=f"{LISTINGS_DIR}/{digest}.txt",
                                    instructions=mix), listing)


def _collapse(text: str) -> str:
    return " ".join(text.split())


# ---- NVIDIA SASS ---------------------------------------------------------------------------------

_SASS_LINE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(.*?)\s*;")
_SASS_FUNCTION = re.compile(r"^\s*Function\s*:")
_PREDICATE = re.compile(r"^@!?U?P\w+\s+")
_SASS_CLASSES = (   # by the opcode's first dot-separated part; the first match wins
    ("async_copy", ("LDGSTS", "LDGDEPBAR", "UBLKCP", "UBLKRED", "UBLKPF", "UTMALDG", "UTMASTG", "UTMAPF",
                    "UTMAREDG", "UTMACCTL", "UTMACMDFLUSH")),
    ("mma", ("HMMA", "IMMA", "DMMA", "BMMA", "HGMMA", "IGMMA", "QGMMA", "BGMMA", "OMMA", "QMMA", "UTCHMMA",
             "UTCIMMA", "UTCQMMA", "UTCOMMA", "UTCMMA")),
    ("global_load", ("LDG", "LD")),
    ("global_store", ("STG", "ST")),
    ("shared_load", ("LDS", "LDSM")),
    ("shared_store", ("STS", "STSM")),
    ("barrier", ("BAR", "MEMBAR", "SYNCS", "DEPBAR", "ERRBAR", "ARRIVES", "FENCE", "WARPSYNC", "CCTL")),
    ("branch", ("BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "BSSY", "BSYNC", "BREAK", "BPT")),
)
_SASS_CLASS = {op: cls for cls, ops in _SASS_CLASSES for op in ops}


def _sass_opcode(instruction: str) -> str:
    return _PREDICATE.sub("", instruction).split(" ", 1)[0]


def _classify_sass(opcode: str, _line: str) -> str:
    return _SASS_CLASS.get(opcode.split(".", 1)[0], "other")


def normalize_sass(text: str) -> list[str]:
    """`cuobjdump -sass` output -> instructions (address and encoding comments gone), a `function:`
    line where each kernel starts (its name gone)."""
    lines = []
    for raw in text.splitlines():
        if _SASS_FUNCTION.match(raw):
            lines.append(FUNCTION)
        elif match := _SASS_LINE.match(raw):
            lines.append(_collapse(match.group(1)))
    return lines


def _triton_tool(name: str) -> Path | None:
    spec = importlib.util.find_spec("triton")   # found, not imported: the builder imports triton per compile
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(root) / "backends" / "nvidia" / "bin" / name
        if path.is_file():
            return path
    return None


@cache
def _version_line(tool: str) -> str:
    """The last line of `tool --version` (NVIDIA's and LLVM's tools both end with the release)."""
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                             check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    release = [line for line in lines if "release" in line.lower() or "version" in line.lower()]
    return (release or lines or [""])[-1]


def from_cubin(cubin: bytes) -> Disassembly:
    """The SASS of a cubin, read by the Triton wheel's `cuobjdump`."""
    tool = _triton_tool("cuobjdump")
    if tool is None:
        return unavailable("no cuobjdump in this builder's Triton (triton/backends/nvidia/bin)")
    with tempfile.TemporaryDirectory(prefix="benchfarm-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([str(tool), "-sass", str(path)], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                              check=False)
    if proc.returncode != 0:
        return unavailable(f"cuobjdump -sass failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    lines = normalize_sass(proc.stdout)
    opcodes = [(_sass_opcode(line), line) for line in lines if line != FUNCTION]
    return _evidence(lines, opcodes, _classify_sass, f"cuobjdump -sass ({_version_line(str(tool))})")


# ---- AMD GCN assembly ----------------------------------------------------------------------------

_AMD_SKIP_BLOCKS = ((".amdgpu_metadata", ".end_amdgpu_metadata"), (".amdhsa_kernel", ".end_amdhsa_kernel"))
_AMD_CLASSES = (   # by opcode prefix; the first match wins
    ("mma", ("v_mfma", "v_smfmac", "v_wmma", "v_swmmac")),
    ("async_copy", ("tensor_load_to_lds", "tensor_store_from_lds", "global_load_lds", "global_load_async",
                    "global_store_async", "buffer_load_lds", "cluster_load_async")),
    ("global_load", ("global_load", "buffer_load", "flat_load", "s_load", "s_buffer_load")),
    ("global_store", ("global_store", "buffer_store", "flat_store", "s_store", "s_buffer_store")),
    ("shared_load", ("ds_read", "ds_load")),
    ("shared_store", ("ds_write", "ds_store")),
    ("barrier", ("s_barrier", "buffer_wbl2", "buffer_inv", "global_wb", "global_inv")),
    ("branch", ("s_branch", "s_cbranch", "s_setpc", "s_swappc", "s_call", "s_endpgm")),
)


def _classify_amdgcn(opcode: str, line: str) -> str:
    if opcode.startswith("buffer_load") and re.search(r"\blds\b", line):   # MUBUF's lds modifier: straight to LDS
        return "async_copy"
    return next((cls for cls, prefixes in _AMD_CLASSES if opcode.startswith(prefixes)), "other")


def normalize_amdgcn(text: str, kernel: str) -> list[str]:
    """Triton's GCN assembly -> instructions and local branch labels; comments, directives, the kernel
    descriptor and metadata gone, the kernel's own label a `function:` line, its name elsewhere `<kernel>`."""
    name = re.compile(rf"(?<![\w.$]){re.escape(kernel)}(?![\w$])") if kernel else None
    lines, skipping = [], ""
    for raw in text.splitlines():
        stripped = raw.split(";", 1)[0].split("//", 1)[0].strip()
        if skipping:
            skipping = "" if stripped.startswith(skipping) else skipping
            continue
        if not stripped:
            continue
        end = next((e for start, e in _AMD_SKIP_BLOCKS if stripped.split()[0] == start), None)
        if end is not None:
            skipping = end
            continue
        if stripped.endswith(":") and not stripped.startswith("."):   # a function's own label
            lines.append(FUNCTION)
            continue
        if stripped.startswith(".") and not stripped.endswith(":"):   # a directive
            continue
        line = _collapse(stripped)
        lines.append(name.sub("<kernel>", line) if name is not None else line)
    return lines


def from_amdgcn(assembly: str, kernel: str) -> Disassembly:
    """The instructions of Triton's GCN assembly stage for the kernel named `kernel`."""
    lines = normalize_amdgcn(assembly, kernel)
    opcodes = [(line.split(" ", 1)[0], line) for line in lines if line != FUNCTION and not line.endswith(":")]
    return _evidence(lines, opcodes, _classify_amdgcn, "triton amdgcn stage")


# ---- CPU code inside IREE modules ---------------------------------------------------------------

_OBJDUMP_LINE = re.compile(r"^\s*[0-9a-f]+:\s+(.*)$")
_OBJDUMP_FUNCTION = re.compile(r"^[0-9a-f]+ <.*>:$")
_TARGET = re.compile(r"(?:0x)?[0-9a-f]+ <[^>+]*(\+0x[0-9a-f]+)?>")   # `0x14b0 <.text+0x60>` -> `<+0x60>`
_RIP = re.compile(r"-?(?:0x)?[0-9a-f]+\(%rip\)")
_ADRP = re.compile(r"^(adrp?\s+\w+,\s*).*$")   # AArch64 PC-relative addresses
_ELF_MAGIC = b"\x7fELF"
_COMMENT = re.compile(r"\s(?:#\s|//).*$")   # x86's `# imm = 0x200`, AArch64's `// =0x10`; not an immediate `#16`


def _classify_x86(opcode: str, line: str) -> str:
    if opcode.startswith(("j", "call", "ret", "loop")):
        return "branch"
    if opcode in ("mfence", "lfence", "sfence"):
        return "barrier"
    if opcode.startswith("tdp"):   # AMX tile dot products
        return "mma"
    if opcode.startswith(("lea", "nop", "prefetch")) or "(" not in line:
        return "other"
    return "global_store" if line.endswith(")") else "global_load"   # AT&T: the destination is last


def _classify_aarch64(opcode: str, _line: str) -> str:
    if opcode in ("b", "bl", "br", "blr", "ret", "cbz", "cbnz", "tbz", "tbnz") or opcode.startswith("b."):
        return "branch"
    if opcode in ("dmb", "dsb", "isb"):
        return "barrier"
    if opcode.endswith(("mopa", "mops")):   # SME outer products
        return "mma"
    if opcode.startswith("ld") and not opcode.startswith("ldadd"):
        return "global_load"
    if opcode.startswith("st"):
        return "global_store"
    return "other"


def normalize_objdump(text: str) -> list[str]:
    """`llvm-objdump -d --no-show-raw-insn` output -> instructions; addresses, comments and symbol
    names gone, branch targets kept as offsets (`<+0x60>`), PC-relative displacements `ADDR`."""
    lines = []
    for raw in text.splitlines():
        if _OBJDUMP_FUNCTION.match(raw):
            lines.append(FUNCTION)
            continue
        match = _OBJDUMP_LINE.match(raw)
        if match is None:
            continue
        line = _collapse(_COMMENT.sub("", match.group(1)))
        if not line:
            continue
        line = _ADRP.sub(r"\1ADDR", _RIP.sub("ADDR(%rip)", _TARGET.sub(lambda m: f"<{m.group(1) or ''}>", line)))
        lines.append(line)
    return lines


def _embedded_elfs(data: bytes) -> list[bytes]:
    """The 64-bit little-endian ELF objects a .vmfb embeds (llvm-cpu executables), each up to the end
    of its section header table."""
    found, start = [], data.find(_ELF_MAGIC)
    while start >= 0:
        end = start
        if start + 0x40 <= len(data) and data[start + 4] == 2 and data[start + 5] == 1:
            shoff, = struct.unpack_from("<Q", data, start + 0x28)
            shentsize, shnum = struct.unpack_from("<HH", data, start + 0x3A)
            if 0 < shoff + shnum * shentsize <= len(data) - start:
                end = start + shoff + shnum * shentsize
                found.append(data[start:end])
        start = data.find(_ELF_MAGIC, max(end, start + 1))
    return found


def _objdump() -> str | None:
    return shutil.which("llvm-objdump")


def from_vmfb(vmfb: bytes, target: Target) -> Disassembly:
    """The CPU code of an IREE llvm-cpu module: its embedded ELF objects through `llvm-objdump`."""
    if target.backend != "llvm-cpu":
        return unavailable(f"no disassembler in this builder for IREE {target.backend} executables")
    tool = _objdump()
    if tool is None:
        return unavailable("no llvm-objdump on this builder (Debian: apt-get install llvm)")
    elfs = _embedded_elfs(vmfb)
    if not elfs:
        return unavailable("no ELF executable found in the IREE module")
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="benchfarm-elf-") as tmp:
        for number, elf in enumerate(elfs):
            path = Path(tmp) / f"executable{number}.so"
            path.write_bytes(elf)
            proc = subprocess.run([tool, "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True,
                                  timeout=TOOL_TIMEOUT_S, check=False)
            if proc.returncode != 0:
                return unavailable(f"llvm-objdump failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
            lines += normalize_objdump(proc.stdout)
    classify = _classify_x86 if target.arch == "x86_64" else _classify_aarch64
    opcodes = [(line.split(" ", 1)[0], line) for line in lines if line != FUNCTION]
    return _evidence(lines, opcodes, classify, f"llvm-objdump -d ({_version_line(tool)})")


def tools_identity() -> dict[str, object]:
    """The disassemblers this builder has and the normalization: part of the compile cache's key, so
    a cached listing is never one another tool or rule made."""
    cuobjdump, objdump = _triton_tool("cuobjdump"), _objdump()
    return {"normalization": NORMALIZATION,
            "cuobjdump": _version_line(str(cuobjdump)) if cuobjdump else None,
            "llvm-objdump": _version_line(objdump) if objdump else None}
