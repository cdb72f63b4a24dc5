"""A stand-in for `buildkite-agent artifact upload|download` and `pipeline upload`, for running a
pipeline's steps locally in tests: NOT Buildkite's agent. It copies files to and from a local folder
that plays Buildkite's artifact store, `$BUILDKITE_SHIM_ARTIFACTS/<step key>/<path>`.

    buildkite-agent artifact upload "PATTERN"                    (the step is $BUILDKITE_STEP_KEY)
    buildkite-agent artifact download "PATTERN" DEST --step KEY
    buildkite-agent pipeline upload                              (stdin -> $BUILDKITE_SHIM_ARTIFACTS/uploaded.yml)

PATTERN is a glob relative to the working directory (`**` crosses folders), as Buildkite's is.
`install(bin_dir)` writes it as an executable `buildkite-agent` to put on PATH.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


UPLOADED = "uploaded.yml"


def _store() -> Path:
    return Path(os.environ["BUILDKITE_SHIM_ARTIFACTS"])


def upload(pattern: str) -> int:
    step = _store() / os.environ["BUILDKITE_STEP_KEY"]
    files = [p for p in Path.cwd().glob(pattern) if p.is_file()]
    for path in files:
        target = step / path.relative_to(Path.cwd())
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    print(f"uploaded {len(files)} artifacts")
    return 0 if files else 1


def download(pattern: str, dest: str, step_key: str) -> int:
    source = _store() / step_key
    files = [p for p in source.glob(pattern) if p.is_file()] if source.is_dir() else []
    for path in files:
        target = Path(dest) / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    print(f"downloaded {len(files)} artifacts")
    return 0 if files else 1


def pipeline_upload() -> int:
    text = sys.stdin.read()
    if not text.strip():
        print("buildkite-agent shim: pipeline upload: no pipeline on stdin", file=sys.stderr)
        return 1
    (_store() / UPLOADED).parent.mkdir(parents=True, exist_ok=True)
    (_store() / UPLOADED).write_text(text)
    print("pipeline uploaded")
    return 0


def main(argv: list[str]) -> int:
    if argv == ["pipeline", "upload"]:
        return pipeline_upload()
    if argv[:2] == ["artifact", "upload"] and len(argv) == 3:
        return upload(argv[2])
    if argv[:2] == ["artifact", "download"] and len(argv) == 6 and argv[4] == "--step":
        return download(argv[2], argv[3], argv[5])
    print(f"buildkite-agent shim: unsupported: {' '.join(argv)}", file=sys.stderr)
    return 2


def install(bin_dir: Path) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "buildkite-agent"
    script.write_text(f"#!{sys.executable}\n" + Path(__file__).read_text())
    script.chmod(0o755)
    return script


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
