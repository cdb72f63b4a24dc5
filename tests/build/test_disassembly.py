"""Code-path evidence with the real compilers and disassemblers: a rename keeps every code digest
while the binaries differ; a tile edit changes the digest and the instruction mix."""

from __future__ import annotations

import hashlib
import re
import shutil
from collections import Counter
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

    write_files(repo, gemm_suite_files([GemmCase("a", m=16, targets=gpu), GemmCase("b", m=32, targets=gpu)]))
    for rel, old, new in rename:
        _edit(repo, rel, old, new)
    commit_all(repo, "taller GEMMs")
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
%1 = OpExtInstImport "NonSemantic.Shader.DebugInfo.100"
OpEntryPoint GLCompute %15 "mm_dispatch_0" %10 %11
OpName %15 "mm_dispatch_0"
OpDecorate %10 Binding 0
%3 = OpTypeInt 32 0
%9 = OpTypeFloat 32
%5 = OpTypePointer StorageBuffer %9
%6 = OpTypePointer Workgroup %9
%7 = OpTypePointer Function %9
%10 = OpVariable %5 StorageBuffer
%11 = OpVariable %6 Workgroup
%14 = OpTypeVoid
%13 = OpTypeFunction %14
%20 = OpConstant %3 2
%15 = OpFunction %14 None %13
%16 = OpLabel
%17 = OpVariable %7 Function
%2 = OpExtInst %14 %1 DebugLine %20 %20
%21 = OpAccessChain %5 %10 %20
%22 = OpLoad %9 %21
OpStore %11 %22
OpControlBarrier %20 %20 %20
%23 = OpLoad %9 %11
OpStore %17 %23
%24 = OpCooperativeMatrixMulAddKHR %9 %23 %23 %23
OpBranch %25
%25 = OpLabel
OpReturn
OpFunctionEnd
"""


def test_spirv_normalization_and_mix() -> None:
    """Names, debug lines and id numbering gone; loads and stores by storage class, only function bodies counted."""
    lines = disassembly.normalize_spirv(_SPIRV)
    assert 'OpEntryPoint GLCompute %1 "<kernel>" %2 %3' in lines and not any("OpName" in line for line in lines)
    assert not any("DebugLine" in line for line in lines) and "function:" in lines
    renumbered = _SPIRV.replace("%2 = OpExtInst", "%99 = OpExtInst").replace("%25", "%40").replace("mm_", "renamed_")
    assert disassembly.normalize_spirv(renumbered) == lines
    classes = disassembly._spirv_classes(lines)
    assert Counter(classes) == {"global_load": 1, "shared_store": 1, "barrier": 1, "shared_load": 1, "other": 2,
                                "mma": 1, "branch": 2}   # other: the access chain, the store to a register


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
