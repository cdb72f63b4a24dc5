"""The end-to-end tier under load (issue 35): `pytest -m e2e` run again and again with CPU burners
beside it, each run's outcome recorded, so that "holds under load" is a count, not an impression.

    .venv/bin/python bench/loaded_e2e.py --runs 10 --burners 2 --out bench-out/loaded-e2e.json

Each run: `burners` processes that spin on the CPU (started before pytest, stopped after), and the
tier as the test command runs it (one test process more than cores, at most 4, by file). The
JSON keeps every run's exit status, wall time, pass/fail counts, the failing tests' ids and the load
average; it is rewritten after every run, so an interrupted series keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _burn() -> None:
    while True:
        pass


def _summary_counts(output: str) -> dict[str, int]:
    tail = output.strip().splitlines()[-1] if output.strip() else ""
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)", tail)}


def _test_processes() -> int:
    """What `infra/local.sh test` runs: one process more than cores, at most 4; one on one core."""
    cores = os.cpu_count() or 1
    return 1 if cores < 2 else min(cores + 1, 4)


def run_once(burners: int, processes: int, extra: list[str]) -> dict[str, object]:
    spinners = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(burners)]
    for spinner in spinners:
        spinner.start()
    parallel = ["-n", str(processes), "--dist", "loadfile", "--no-loadscope-reorder"] if processes > 1 else []
    # as `infra/local.sh test` runs pytest: bytecode written, where the host sets PYTHONDONTWRITEBYTECODE
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "e2e", "-q", "-p", "no:cacheprovider",
                               *parallel, *extra, "tests"], cwd=ROOT, capture_output=True, text=True, env=env)
        load = os.getloadavg()[1]
    finally:
        for spinner in spinners:
            spinner.terminate()
            spinner.join()
    output = proc.stdout + proc.stderr
    return {"returncode": proc.returncode, "wall_s": round(time.monotonic() - start, 1),
            "counts": _summary_counts(proc.stdout), "load_5min": round(load, 2),
            "failed": re.findall(r"^(?:FAILED|ERROR) (\S+)", output, flags=re.MULTILINE),
            "tail": output[-4000:] if proc.returncode else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--burners", type=int, default=2, help="CPU-spinning processes beside each run")
    parser.add_argument("--processes", type=int, default=_test_processes(),
                        help="test processes (pytest-xdist by file), as the test command chooses")
    parser.add_argument("--out", default="loaded-e2e.json")
    args, extra = parser.parse_known_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    runs: list[dict[str, object]] = []
    report: dict[str, object] = {"commit": commit, "cpus": os.cpu_count(), "burners": args.burners,
                                 "processes": args.processes, "runs": runs}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for i in range(args.runs):
        result = run_once(args.burners, args.processes, extra)
        runs.append(result)
        report["passed_runs"] = sum(1 for r in runs if r["returncode"] == 0)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=1))
        tmp.replace(out)
        print(f"run {i + 1}/{args.runs}: exit {result['returncode']}, {result['counts']}, {result['wall_s']} s, "
              f"load {result['load_5min']}, failed {result['failed']}", flush=True)
    print(f"{report['passed_runs']} of {args.runs} runs passed")
    sys.exit(0 if report["passed_runs"] == args.runs else 1)


if __name__ == "__main__":
    main()
