"""Where a paired job's timing goes, case by case and round by round (GPU host).

    python3 bench/round_cost.py --head .gpu/acc/readme --base .gpu/acc/base --cases 'gemm/*decode*' --out $OUT

Runs `run_bundle` in-process on the cases matching the glob (head paired with base, default
measurement settings for the device's class) and writes round_cost.json: per case the wall time of
each round (from the progress callback), rounds, samples and placements, and the job's totals.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.agents.devices import discover_local_devices  # noqa: E402
from pipeline.agents.local import run_bundle  # noqa: E402
from pipeline.agents.run_job import bundle_folder  # noqa: E402
from pipeline.build.bundle import load_bundle  # noqa: E402
from pipeline.config import load_settings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head", required=True)
    parser.add_argument("--base", required=True)
    parser.add_argument("--cases", default="*")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    head_dir, base_dir = bundle_folder(Path(args.head)), bundle_folder(Path(args.base))
    head, base = load_bundle(head_dir), load_bundle(base_dir)
    head = head.model_copy(update={"entries": [e for e in head.entries if fnmatch.fnmatch(e.case, args.cases)]})
    device = next(d for d in discover_local_devices() if d.device_class.runtime == "cuda")
    steps: list[tuple[float, str]] = []
    start = time.perf_counter()
    document = run_bundle(bundle_dir=head_dir, manifest=head, device=device, run_id="cost", job_id="j",
                          settings=load_settings().measurement, base_bundle_dir=base_dir, base_manifest=base,
                          progress=lambda d, *_: steps.append((time.perf_counter() - start, d)))
    per_case: dict[str, list[float]] = {}
    for (t0, _), (t1, d) in zip(steps, steps[1:]):
        if d.startswith("timing: round"):
            per_case.setdefault(d.split(" ", 3)[3], []).append(round(t1 - t0, 3))
    report = {"total_s": round(time.perf_counter() - start, 1), "cases": [
        {"case": r.case, "status": r.status, "rounds": r.rounds, "samples": len(r.samples),
         "round_s": per_case.get(r.case), "placements": r.environment.get("placements"),
         "median_us": r.stats.median * 1e6 if r.stats else None} for r in document.results]}
    Path(args.out, "round_cost.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report)[:6000])


if __name__ == "__main__":
    main()
