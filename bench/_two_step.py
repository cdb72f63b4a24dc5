"""The command line of a GPU bench made in two steps: `build` bundles here on the CPU builder,
`run` them on the GPU host (where $OUT collects the figures)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path


def two_step_main(doc: str, build: Callable[[Path], None], run: Callable[[Path, Path], None], bundles: str) -> None:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    sub.add_parser("build").add_argument("--out", default=bundles)
    p = sub.add_parser("run")
    p.add_argument("--bundles", default=bundles)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    if args.step == "build":
        build(Path(args.out))
    else:
        run(Path(args.bundles), Path(args.out))
