"""The repository's own kernel suite (`kernels/`, as checked out) committed into a temporary git
repository, so tests build exactly what `benchfarm` builds at a commit."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.suite_repo import commit_all, git

ROOT = Path(__file__).resolve().parents[2]

ALL_TARGETS = (
    "llvm-cpu:x86_64", "llvm-cpu:aarch64-android", "vulkan:valhall", "vulkan:adreno",
    "cuda:sm_80", "cuda:sm_90", "hip:gfx942", "hip:gfx950", "hip:gfx1250",
)


def default_suite_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "suite-repo"
    shutil.copytree(ROOT / "kernels", repo / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q", "-b", "main")
    commit_all(repo, "the default suite")
    return repo
