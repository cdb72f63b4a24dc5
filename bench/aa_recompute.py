"""Recompute the paired verdicts of A/A jobs from their dumped samples (issue 11).

`bench/gpu_acceptance.py run` writes each A/A job's samples to OUT/<label>.npz (per case: the head's
and the paired base's samples and the round sizes). The service computes a verdict from stored
samples when it is asked, so running today's statistics over those dumps says what the service
would answer now about the same measurements, without another GPU run:

    .venv/bin/python bench/aa_recompute.py aa2.npz aa3.npz [--csv per-case.csv]
    .venv/bin/python bench/aa_recompute.py --unpaired unpaired-base.npz unpaired-readme.npz [more.npz ...]

The unpaired form judges each dump's cases against the dump before it (a chain of separate jobs, as
`ACCEPTANCE_UNPAIRED_RUNS` runs them: each job against the one before), as the service judges a
fresh series (no learned run-to-run noise: the run level pooled over the comparison's rows, the
threshold assuming `CompareSettings.default_run_noise`).

A paired A/A's per-case CSV (`--csv` below; docs/benchmarks/aa-*-paired*.csv) is enough to redo a
job's calibration by its identical binaries (`--from-csv`, nightly A/A: every row one binary): a
row's t-test needs only its mean log ratio, the variance of its round values and their count, which
its change, interval and rounds give; rounds are rebuilt with exactly those (the calibrated variance
taken as the rounds', which a rule that scales by the median z^2 maps onto its own answer). So a
change of that rule can be judged on the GPU measurements already taken:

    .venv/bin/python bench/aa_recompute.py --from-csv docs/benchmarks/aa-h100-2026-11-25-paired-3reps.csv

Prints, per dump: cases flagged at the paired floor (`CompareSettings.paired_min_change`, the
smallest threshold a case can have: a case's noise only raises it), the largest |change|, and a
Kolmogorov-Smirnov test of the p-values against uniform, for the suite's own cases, the vendor
controls and all.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy.stats import kstest
from scipy.stats import t as student_t

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.analysis.stats import Verdict, paired_verdicts, threshold, verdicts  # noqa: E402
from pipeline.config import CompareSettings  # noqa: E402


def recompute(path: Path, rows: list[dict[str, object]] | None = None) -> dict[str, object]:
    """The summary of one paired dump; each case's verdict appended to `rows` when given."""
    dump = np.load(path)
    meta = json.loads(str(dump["meta"]))
    items = [(dump[f"b{i}"].astype(float), dump[f"h{i}"].astype(float), m["rounds"]) for i, m in enumerate(meta)]
    cases = [m["case"] for m in meta]
    # as compare.py: rows whose base and head are one binary calibrate the job's paired noise, per kind
    # (dumps written before `same_binary` was recorded: none calibrate)
    found = paired_verdicts(items, min_change=CompareSettings().paired_min_change,
                            calibration=[bool(m.get("same_binary")) for m in meta], groups=_kinds(cases))
    return _summary(path.stem, cases, found, rows)


def recompute_csv(path: Path, rows: list[dict[str, object]] | None = None) -> list[dict[str, object]]:
    """The summaries of a paired A/A CSV's runs, each row's rounds rebuilt from its change, interval
    and round count (module doc); rows without an interval (too few rounds) keep no rounds' spread."""
    runs: dict[str, list[dict[str, str]]] = {}
    with path.open() as source:
        for row in csv.DictReader(source):
            runs.setdefault(row["run"], []).append(row)
    reports = []
    for run, table in runs.items():
        items = []
        for row in table:
            count = int(row["rounds"])
            mean = math.log1p(float(row["change"]))
            half = (math.log1p(float(row["ci_high"])) - math.log1p(float(row["ci_low"]))) / 2 if row["ci_low"] else 0.0
            sd = half / student_t.ppf(0.975, count - 1) * math.sqrt(count) if count > 1 else 0.0
            # round values with exactly that mean and sample sd: a fixed pattern of mean 0 and sd 1
            pattern = np.arange(count) - (count - 1) / 2
            pattern = pattern / pattern.std(ddof=1) if count > 1 else pattern
            levels = mean + sd * pattern
            items.append((np.ones(5 * count), np.repeat(np.exp(levels), 5), [5] * count))
        cases = [row["case"] for row in table]
        found = paired_verdicts(items, min_change=CompareSettings().paired_min_change,
                                calibration=[True] * len(items), groups=_kinds(cases))
        reports.append(_summary(run, cases, found, rows))
    return reports


def _kinds(cases: list[str]) -> list[str]:
    return ["control" if c.endswith("/vendor") else "suite" for c in cases]


def recompute_unpaired(base: Path, head: Path, rows: list[dict[str, object]] | None = None) -> dict[str, object]:
    """The summary of the head dump's cases judged unpaired against the base dump's (fresh series)."""
    sides, digests = [], []
    for path in (base, head):
        dump = np.load(path)
        meta = json.loads(str(dump["meta"]))
        sides.append({m["case"]: (dump[f"h{i}"].astype(float), m["rounds"]) for i, m in enumerate(meta)})
        digests.append({m["case"]: m.get("digest") for m in meta})
    cases = sorted(set(sides[0]) & set(sides[1]))
    # as compare.py: identical binaries in both runs carry a shift the runs share. Dumps written before
    # digests were recorded are of A/A jobs only (gpu_acceptance dumps no other): all identical
    same = [digests[0][c] == digests[1][c] for c in cases]
    settings = CompareSettings()
    limit = threshold(settings.min_change, settings.default_run_noise * 2 ** 0.5, settings.noise_factor)
    found = verdicts([(sides[0][c], sides[1][c]) for c in cases], min_change=limit,
                     default_run_noise=settings.default_run_noise,
                     groups=_kinds(cases), calibration=same)   # as compare.py
    return _summary(head.stem, cases, found, rows)


def _summary(name: str, cases: list[str], found: list[Verdict], rows: list[dict[str, object]] | None
             ) -> dict[str, object]:
    if rows is not None:
        rows.extend({"run": name, "case": c, "change": v.change, "ci_low": v.ci_low, "ci_high": v.ci_high,
                     "pvalue": v.pvalue, "status": v.status, "rounds": v.rounds}
                    for v, c in zip(found, cases, strict=True))
    meta = [{"case": c} for c in cases]
    report: dict[str, object] = {"dump": name, "cases": len(meta)}
    for group, pick in (("suite", lambda c: not c.endswith("/vendor")), ("vendor", lambda c: c.endswith("/vendor")),
                        ("all", lambda c: True)):
        chosen = [v for v, m in zip(found, meta, strict=True) if pick(m["case"])]
        pvalues = [v.pvalue for v in chosen if v.pvalue is not None]
        if not pvalues:   # a suite without vendor controls (the CPU's)
            report[group] = {"cases": len(chosen), "flagged": 0, "largest_abs_change": 0.0, "ks_d": math.nan,
                             "ks_p": math.nan, "p_at_1": 0}
            continue
        test = kstest(pvalues, "uniform")
        report[group] = {
            "cases": len(chosen),
            "flagged": sum(v.status in ("regressed", "improved") for v in chosen),
            "largest_abs_change": max(abs(v.change or 0.0) for v in chosen),
            "ks_d": round(float(test.statistic), 3), "ks_p": float(test.pvalue),
            "p_at_1": sum(p >= 0.999 for p in pvalues),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dumps", nargs="+", type=Path)
    parser.add_argument("--unpaired", action="store_true",
                        help="dumps of separate jobs, in the order they ran: each judged against the one before")
    parser.add_argument("--csv", type=Path, help="also write every case's verdict in every dump here")
    parser.add_argument("--from-csv", action="store_true",
                        help="the arguments are paired A/A CSVs (this script's --csv), not dumps: rebuild and recompute")
    args = parser.parse_args()
    if args.unpaired and len(args.dumps) < 2:
        parser.error("--unpaired takes two or more dumps: the first base job's, then each later job's")
    rows: list[dict[str, object]] = []
    if args.from_csv:
        reports = [report for path in args.dumps for report in recompute_csv(path, rows)]
    elif args.unpaired:
        reports = [recompute_unpaired(base, head, rows) for base, head in zip(args.dumps, args.dumps[1:])]
    else:
        reports = [recompute(p, rows) for p in args.dumps]
    for report in reports:
        print(f"{report['dump']}: {report['cases']} cases")
        for group in ("suite", "vendor", "all"):
            g = report[group]
            assert isinstance(g, dict)
            print(f"  {group:6} {g['cases']:3} cases, flagged {g['flagged']}, largest |change| "
                  f"{100 * g['largest_abs_change']:.2f} %, KS D {g['ks_d']:.3f} p {g['ks_p']:.3g}, p = 1: {g['p_at_1']}")
    pvalues = [float(r["pvalue"]) for r in rows if r["pvalue"] is not None]  # type: ignore[arg-type]
    pooled = kstest(pvalues, "uniform")
    print(f"pooled: {len(pvalues)} p-values, KS D {pooled.statistic:.3f} p {pooled.pvalue:.3g}")
    if args.csv:
        with args.csv.open("w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
