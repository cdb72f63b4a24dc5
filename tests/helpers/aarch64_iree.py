"""IREE's runtime tools for aarch64 Linux (glibc), for the phone tests under qemu-aarch64.

They come from the `iree-base-runtime` manylinux aarch64 wheel of the version the host runs (so the
compiler that built the bundle and the runtime that runs it agree): `pip download` once into
`<venv>/share/benchfarm/iree-tools-aarch64-<version>/`, then `iree-run-module` and
`iree-benchmark-module` are taken out of it. `infra/local.sh test` fetches them ahead of the tests
(`python -m tests.helpers.aarch64_iree`); BENCHFARM_TEST_AARCH64_TOOLS names another folder.

These binaries need an aarch64 glibc and libstdc++ (Debian: libc6-arm64-cross,
libstdc++6-arm64-cross, under /usr/aarch64-linux-gnu); a real phone needs an Android build.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

TOOLS = ("iree-run-module", "iree-benchmark-module")
PLATFORM = "manylinux_2_28_aarch64"
SYSROOT = Path("/usr/aarch64-linux-gnu")


def tools_dir() -> Path:
    named = os.environ.get("BENCHFARM_TEST_AARCH64_TOOLS")
    if named:
        return Path(named)
    version = importlib.metadata.version("iree-base-runtime")
    return Path(sys.prefix) / "share" / "benchfarm" / f"iree-tools-aarch64-{version}"


def fetch_tools() -> Path:
    """The folder holding the aarch64 tools, downloaded (pip) and unpacked the first time."""
    folder = tools_dir()
    if all((folder / t).is_file() for t in TOOLS):
        return folder
    version = importlib.metadata.version("iree-base-runtime")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    with tempfile.TemporaryDirectory(prefix="benchfarm-aarch64-") as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
             f"--platform={PLATFORM}", f"--python-version={python}", f"iree-base-runtime=={version}", "-d", tmp],
            capture_output=True, text=True, check=False,
        )
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise RuntimeError(f"pip download of iree-base-runtime=={version} for {PLATFORM} failed: {proc.stderr[-2000:]}")
        folder.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as wheel:
            for tool in TOOLS:
                target = folder / tool
                target.write_bytes(wheel.read(f"iree/_runtime_libs/{tool}"))
                target.chmod(0o755)
    return folder


if __name__ == "__main__":
    print(fetch_tools())
