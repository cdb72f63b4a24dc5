"""`python -m pipeline.agents.runners.cuda_launch`: one launch of each of some bundle entries' cubins,
in turn, in a process of its own, for a profiler to watch (`pipeline.agents.counters` runs it under
Nsight Compute, which then starts once for a whole group of binaries).

    python -m pipeline.agents.runners.cuda_launch --plan PLAN.json --launched LAUNCHED.json [--device UUID]

PLAN.json lists {"bundle", "case", "target", "seed"}; each entry's inputs are drawn from its seed as its
check drew them (`local.input_seed`), so each launch reads its check's values. LAUNCHED.json, rewritten
after every entry, maps the entry's position in the plan to "ok", or to why it was not launched: the
profiler's k-th launch is the k-th "ok" (an entry that fails never stops the others).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.agents.runners.cuda_launch",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--plan", required=True, type=Path)
    parser.add_argument("--launched", required=True, type=Path)
    parser.add_argument("--device", default=None, help="the GPU's UUID (default: GPU 0)")
    args = parser.parse_args(argv)
    from pipeline.agents.runners.cuda_runner import CudaDevice, launch_once
    from pipeline.contracts import BundleManifest
    from pipeline.contracts.bundle_dir import load_bundle

    launched: dict[str, str] = {}

    def record(position: int, status: str) -> None:
        launched[str(position)] = status
        partial = args.launched.with_suffix(".tmp")
        partial.write_text(json.dumps(launched))
        os.replace(partial, args.launched)

    try:
        plan = json.loads(args.plan.read_text())
        device = CudaDevice(args.device)
    except Exception as exc:  # the profiler's caller reads this line as the reason
        print(f"cuda_launch: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    manifests: dict[str, BundleManifest] = {}
    for position, item in enumerate(plan):
        try:
            manifest = manifests.get(item["bundle"]) or load_bundle(Path(item["bundle"]))
            manifests[item["bundle"]] = manifest
            entry = next((e for e in manifest.entries if e.case == item["case"] and e.target == item["target"]), None)
            if entry is None:
                raise ValueError(f"{item['bundle']}: no entry {item['case']} on {item['target']}")
            launch_once(device, Path(item["bundle"]), entry, np.random.default_rng(int(item["seed"])))
        except Exception as exc:  # this entry's reason; the others are launched
            record(position, f"{type(exc).__name__}: {exc}")
            continue
        record(position, "ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
