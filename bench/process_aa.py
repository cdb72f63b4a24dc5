"""A/A between separate processes on part of a bundle (a quick look at run-level noise on a GPU host):
the selected cases timed by `run_bundle` in one process, then again in a fresh process, with the
agent's default measurement settings; per case, each run's round medians and the change between the
runs (`stats.unpaired_estimates` over the rounds alone, no run-level noise assumed).

    python3 bench/process_aa.py --bundle .gpu/acc/base --cases '*/vendor' --out $OUT/process-aa

Not a verdict: `bench/gpu_acceptance.py` is the suite-scale A/A through `benchfarm serve` and
`run-job`; this isolates the agent's measurement (what a timing change does to two runs of one binary).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, TypedDict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class Row(TypedDict):
    case: str
    change: float | None
    ci: list[float | None]
    pvalue: float | None
    round_medians_us: list[list[float]]


def one(bundle: Path, cases: str, out: Path) -> None:
    """Child process: time the cases once, write their samples and round sizes to `out` (npz)."""
    import numpy as np

    from pipeline.agents.agent import select_cases
    from pipeline.agents.devices import nvidia_devices
    from pipeline.agents.local import run_bundle
    from pipeline.config import Settings
    from pipeline.contracts.bundle_dir import load_bundle

    bundle_dir = next(p for p in bundle.iterdir() if p.is_dir()) if not (bundle / "manifest.json").exists() else bundle
    device = nvidia_devices()[0]
    manifest = select_cases(load_bundle(bundle_dir), device, cases)
    document = run_bundle(bundle_dir=bundle_dir, manifest=manifest, device=device, run_id="process-aa",
                          job_id=out.stem, settings=Settings().measurement)
    ok = [r for r in document.results if r.status == "ok"]
    samples: dict[str, Any] = {f"s{i}": np.asarray(r.samples, dtype=np.float64) for i, r in enumerate(ok)}
    np.savez_compressed(out, meta=json.dumps([{"case": r.case, "rounds": r.rounds, "environment": r.environment}
                                              for r in ok]), **samples)


def compare(first: Path, second: Path) -> list[Row]:
    import numpy as np

    from pipeline.results.analysis.stats import unpaired_estimates

    def read(path: Path) -> dict[str, tuple[list[float], list[int]]]:
        data = np.load(path)
        return {m["case"]: (data[f"s{i}"].tolist(), m["rounds"]) for i, m in enumerate(json.loads(str(data["meta"])))}

    a, b = read(first), read(second)
    cases = sorted(set(a) & set(b))
    rows: list[Row] = []
    for case, estimate in zip(cases, unpaired_estimates([(a[c], b[c]) for c in cases]), strict=True):
        levels = []
        for samples, rounds in (a[case], b[case]):
            starts = np.cumsum([0, *rounds])
            levels.append([round(float(np.median(samples[s:e])) * 1e6, 2) for s, e in zip(starts, starts[1:])])
        rows.append({"case": case, "change": estimate.change, "ci": [estimate.ci_low, estimate.ci_high],
                     "pvalue": estimate.pvalue, "round_medians_us": levels})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--cases", required=True, help="glob over case ids")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        one(args.bundle, args.cases, args.child)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [args.out / f"run{i}.npz" for i in (1, 2)]
    for run in runs:   # a fresh process each: what differs between two jobs of one binary
        subprocess.run([sys.executable, __file__, "--bundle", str(args.bundle), "--cases", args.cases,
                        "--out", str(args.out), "--child", str(run)], check=True)
    rows = compare(*runs)
    (args.out / "process-aa.json").write_text(json.dumps(rows, indent=1))
    for row in sorted(rows, key=lambda r: -abs(r["change"] or 0)):
        print(f"{(row['change'] or 0) * 100:+7.2f} %  p={row['pvalue']:.2g}  {row['case']}  {row['round_medians_us']}")


if __name__ == "__main__":
    main()
