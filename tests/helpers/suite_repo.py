"""Temporary git repositories holding a kernel suite, for builder, agent and end-to-end tests.

`make_suite_repo(tmp_path, gemm_suite_files([...]))` gives a committed checkout whose `kernels/`
folder is a small, fast GEMM suite (IREE, llvm-cpu). Variants per case: "ok", "wrong" (the
kernel computes 1 + A @B: compiles, runs, fails the reference check), "broken" (MLIR that
iree-compile rejects) and "slow" (a correct kernel with a poor register tile, 1x8, the kind of
change a kernel engineer makes by mistake: several times slower on x86). `tile` sets the register
tile of a correct kernel instead (rows x columns; on a 64x64x64 GEMM on x86 (2026-11-24, a shared
2-core VM): IREE's default ~0.03 ms, 4x4 ~0.065 ms, 2x4 ~0.1 ms, 2x2 ~0.15 ms).
"""

from __future__ import annotations

import subprocess
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

SUITE = "kernels"
_GIT_ENV_ARGS = ("-c", "user.name=Bench Tester", "-c", "user.email=tester@example.com", "-c", "commit.gpgsign=false")

Variant = Literal["ok", "wrong", "broken", "slow"]


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *_GIT_ENV_ARGS, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout.strip()


def write_files(repo: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def commit_all(repo: Path, message: str) -> str:
    """Stage everything and commit; returns the new commit's full sha."""
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make_suite_repo(tmp_path: Path, files: dict[str, str], *, name: str = "repo", message: str = "initial") -> Path:
    """A new git repository at tmp_path/name with `files` (paths relative to its root) committed."""
    repo = tmp_path / name
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    write_files(repo, files)
    commit_all(repo, message)
    return repo


@dataclass(frozen=True)
class GemmCase:
    name: str
    m: int = 8
    n: int = 16
    k: int = 32
    variant: Variant = "ok"
    tile: tuple[int, int] | None = None
    targets: tuple[str, ...] = ("llvm-cpu:*",)
    """target patterns the case supports: another machine's (`("cuda:sm_90",)`) makes a case this one
    neither builds nor runs"""


_INIT = '''\
"""A small GEMM suite for tests."""
from pipeline.build.suite_api import IreeSource, KernelCase
from pipeline.contracts.ids import CaseId
from pipeline.contracts.manifest import ReferenceSpec, TensorSpec

CASES = {cases!r}


TILE = (
    " {{{{compilation_info = #iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<"
    "distribution = [64, 64, 0], vector_common_parallel = [{{}}, {{}}, 0], vector_reduction = [0, 0, 1]>, "
    "translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>}}}}"
)


def mlir(m, n, k, variant, tile=None):
    init = "1.0" if variant == "wrong" else "0.0"
    tile = (1, 8) if variant == "slow" else tile
    attrs = TILE.format(*tile) if tile else ""
    b_rows = k + 1 if variant == "broken" else k   # a shape mismatch iree-compile rejects
    return f"""
func.func @mm(%a: tensor<{{m}}x{{k}}xf32>, %b: tensor<{{b_rows}}x{{n}}xf32>) -> tensor<{{m}}x{{n}}xf32> {{{{
  %init = arith.constant {{init}} : f32
  %e = tensor.empty() : tensor<{{m}}x{{n}}xf32>
  %c0 = linalg.fill ins(%init : f32) outs(%e : tensor<{{m}}x{{n}}xf32>) -> tensor<{{m}}x{{n}}xf32>
  %c = linalg.matmul{{attrs}} ins(%a, %b : tensor<{{m}}x{{k}}xf32>, tensor<{{b_rows}}x{{n}}xf32>) outs(%c0 : tensor<{{m}}x{{n}}xf32>) -> tensor<{{m}}x{{n}}xf32>
  return %c : tensor<{{m}}x{{n}}xf32>
}}}}
"""


def case(name, m, n, k, variant, tile=None, targets=("llvm-cpu:*",)):
    return KernelCase(
        case_id=CaseId(family="gemm", name=name, shape=f"{{m}}x{{n}}x{{k}}", dtype="f32", impl="iree"),
        model="test",
        targets=tuple(targets),
        tensors=(
            TensorSpec(name="a", role="input", shape=[m, k], dtype="f32"),
            TensorSpec(name="b", role="input", shape=[k, n], dtype="f32"),
            TensorSpec(name="c", role="output", shape=[m, n], dtype="f32", init="none"),
        ),
        arguments=("a", "b"),
        results=("c",),
        reference=ReferenceSpec(module="reference", function="matmul", atol=1e-4, rtol=1e-5),
        flops=2 * m * n * k,
        bytes=4 * (m * k + k * n + m * n),
        make_source=lambda target, m=m, n=n, k=k, variant=variant, tile=tile: IreeSource(mlir=mlir(m, n, k, variant, tile),
                                                                                   entry_point="mm"),
        source_files=("__init__.py", "reference.py"),
    )


def cases():
    return [case(*c) for c in CASES]
'''

_REFERENCE = '''\
import numpy as np


def matmul(a, b):
    return np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64)
'''


def gemm_suite_files(cases: Sequence[GemmCase], *, suite: str = SUITE) -> dict[str, str]:
    """Files (relative to the repository root) of a suite folder holding the given GEMM cases."""
    rows = [(c.name, c.m, c.n, c.k, c.variant, c.tile, c.targets) for c in cases]
    return {
        f"{suite}/__init__.py": _INIT.format(cases=rows),
        f"{suite}/reference.py": _REFERENCE,
    }


def case_id(case: GemmCase) -> str:
    return f"gemm/{case.name}/{case.m}x{case.n}x{case.k}/f32/iree"


def dedent(text: str) -> str:
    return textwrap.dedent(text)
