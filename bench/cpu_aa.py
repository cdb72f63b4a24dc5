"""A/A on this machine's CPU through `benchfarm run` (issues 11 and 30): consecutive commits that
change no kernel, each benchmarked paired with the previous one, judged with the identical-binary
shortcut off (so that identical code is tested as if it differed); then the same unpaired.

    .venv/bin/python bench/cpu_aa.py --runs 5 --out bench-out/cpu-aa.json

A temporary clone of this checkout; `benchfarm run` in a subprocess with a fresh BENCHFARM_HOME and
default settings (but the shortcut); after each run the store's comparison of the new commit with its
base: how many cases were flagged (different: regressed or improved), how many were similar and how
many inconclusive, and every p-value. At the end a Kolmogorov-Smirnov test of all
p-values against the uniform distribution (valid statistics give uniform p-values on A/A).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default="cpu-aa.json")
    args = parser.parse_args()
    from scipy.stats import kstest

    from pipeline.config import CompareSettings
    from pipeline.results.store.compare import compare
    from pipeline.results.store.db import open_store, session_scope

    work = Path(tempfile.mkdtemp(prefix="bf-cpu-aa-"))
    repo, home = work / "repo", work / "home"
    subprocess.run(["git", "clone", "-q", "--no-local", str(ROOT), str(repo)], check=True)
    git = ["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env.update(BENCHFARM_HOME=str(home), BENCHFARM_COMPARE__SAME_BINARY_SHORTCUT="false")
    report: dict = {"runs": []}
    pvalues: dict[str, list[float]] = {"paired": [], "unpaired": []}
    shas: list[str] = []
    for i in range(args.runs + 1):
        if i:
            (repo / "README.md").write_text((repo / "README.md").read_text() + f"\nA/A edit {i}\n")
            subprocess.run([*git, "commit", "-q", "-am", f"A/A {i}: README only"], check=True)
        sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        shas.append(sha)
        for mode in (["--unpaired"], []) if i else ([],):
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--suite", str(repo / "kernels"),
                                   "--ref", sha, *mode], env=env, cwd=work, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"benchfarm run failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
            if not i:
                continue
            kind = "unpaired" if mode else "paired"
            engine = open_store(f"sqlite:///{home / 'benchfarm.db'}")
            with session_scope(engine) as session:
                from pipeline.results.store.compare import result_device_classes
                (device_class,) = result_device_classes(session, repository="repo", head_sha=sha)
                comparison = compare(session, repository="repo", head_sha=sha, device_class=device_class,
                                     settings=CompareSettings(same_binary_shortcut=False),
                                     base_sha=shas[i - 1] if kind == "unpaired" else None)
            engine.dispose()
            rows = [r for r in comparison.rows if not r.is_control]
            flagged = [(str(r.case_id), r.change, r.ci_low, r.ci_high) for r in rows if r.status in ("regressed", "improved")]
            pvalues[kind] += [r.pvalue for r in rows if r.pvalue is not None]
            report["runs"].append({
                "run": i, "kind": kind, "wall_s": round(time.perf_counter() - start, 1), "cases": len(rows),
                "flagged": flagged, "max_abs_change": max((abs(r.change) for r in rows if r.change is not None), default=None),
                "statuses": sorted({r.status for r in rows}),
                "counts": {s: sum(r.status == s for r in rows) for s in sorted({r.status for r in rows})},
                "pvalues": {str(r.case_id): r.pvalue for r in rows}, "changes": {str(r.case_id): r.change for r in rows}})
            print(json.dumps({k: v for k, v in report["runs"][-1].items() if k not in ("pvalues", "changes")}), flush=True)
    for kind, values in pvalues.items():
        ks = kstest(values, "uniform")
        report[f"ks_{kind}"] = {"n": len(values), "statistic": ks.statistic, "pvalue": ks.pvalue,
                                "deciles": [sum(d / 10 <= p < (d + 1) / 10 or (d == 9 and p == 1.0) for p in values)
                                            for d in range(10)]}
    report["flagged_total"] = {k: sum(len(r["flagged"]) for r in report["runs"] if r["kind"] == k) for k in pvalues}
    report["status_totals"] = {k: {s: sum(r["counts"].get(s, 0) for r in report["runs"] if r["kind"] == k)
                                   for s in ("similar", "inconclusive", "regressed", "improved")} for k in pvalues}
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
