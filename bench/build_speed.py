"""Build speed of the whole kernel suite for every target: cold, no-op and one-kernel-changed builds.

The suite (this checkout's `kernels/`, working tree included) is copied into a temporary git
repository and committed, so what is measured is exactly what `benchfarm` builds at a commit:
1. cold: an empty compile cache, every case x target compiled;
2. no-op, same commit: the finished bundle is found and reused;
3. no-op, new commit: a commit that changes no kernel (a README) builds a new bundle from the cache;
4. one IREE kernel changed: one GEMM shape gets a CPU tile (`TILES`), so its MLIR changes on the
   two llvm-cpu targets and nothing else recompiles;
5. one Triton kernel file changed (a comment in `gather_scatter/triton_kernel.py`): every case whose
   kernel lives in that file recompiles (the cache keys on the whole module's digest).
Prints a table (seconds, compiled / cached / failed, ratio to the cold build).

    .venv/bin/python bench/build_speed.py [--workers N] [--targets ...]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.build.bundle import BuildCounts, build_bundle  # noqa: E402
from pipeline.build.suite_loader import locate_suite, resolve_commit  # noqa: E402

ALL_TARGETS = (
    "llvm-cpu:x86_64", "llvm-cpu:aarch64-android", "vulkan:valhall", "vulkan:adreno",
    "cuda:sm_80", "cuda:sm_90", "hip:gfx942", "hip:gfx950", "hip:gfx1250",
)
_GIT = ("-c", "user.name=bench", "-c", "user.email=bench@example.com", "-c", "commit.gpgsign=false")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *_GIT, *args], check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make_repo(tmp: Path) -> Path:
    repo = tmp / "repo"
    (repo / "kernels").mkdir(parents=True)
    shutil.copytree(ROOT / "kernels", repo / "kernels", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "suite")
    return repo


def build(repo: Path, tmp: Path, targets: list[str], workers: int) -> tuple[float, BuildCounts, int]:
    location = locate_suite(repo / "kernels")
    counts = BuildCounts()
    start = time.perf_counter()
    _, manifest = build_bundle(location=location, sha=resolve_commit(location), targets=targets,
                               out_dir=tmp / "bundles", cache_dir=tmp / "cache", workers=workers, counts=counts)
    return time.perf_counter() - start, counts, len(manifest.entries)


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=0, help="compile processes (0: one per core)")
    parser.add_argument("--targets", nargs="*", default=list(ALL_TARGETS))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="benchfarm-build-speed-") as name:
        tmp = Path(name)
        repo = make_repo(tmp)
        rows.append(("cold (empty cache)", *build(repo, tmp, args.targets, args.workers)))
        rows.append(("no-op, same commit", *build(repo, tmp, args.targets, args.workers)))
        (repo / "README.md").write_text("docs only\n")
        commit(repo, "docs")
        rows.append(("no-op, new commit", *build(repo, tmp, args.targets, args.workers)))
        append(repo / "kernels/gemm/iree_cases.py", '\nTILES["square-512/512x512x512"] = Tile(vector=(1, 16))\n')
        commit(repo, "one IREE tile")
        rows.append(("one IREE kernel changed", *build(repo, tmp, args.targets, args.workers)))
        append(repo / "kernels/gather_scatter/triton_kernel.py", "\n# touched\n")
        commit(repo, "one Triton kernel file")
        rows.append(("one Triton kernel file changed", *build(repo, tmp, args.targets, args.workers)))
    cold = rows[0][1]
    print(f"{'build':36} {'seconds':>8} {'compiled':>8} {'cached':>7} {'failed':>7} {'entries':>7} {'vs cold':>8}")
    for label, seconds, counts, entries in rows:
        print(f"{label:36} {seconds:8.2f} {counts.compiled:8d} {counts.cached:7d} {counts.failed:7d} {entries:7d} "
              f"{seconds / cold:8.3f}")


if __name__ == "__main__":
    main()
