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
threshold assuming `CompareSettings.default_run_noise`). Dumps from several folders (a chain per GPU of
one host, as `lent_gpu.sh` returns them) are chains apart, named FOLDER/JOB. `--rounds-csv` also keeps
each job's round values (the logs every statistic here starts from; kilobytes where the dumps are
megabytes, so they go into docs/benchmarks), and `--from-rounds` redoes the chains from that file alone:

    .venv/bin/python bench/aa_recompute.py --from-rounds docs/benchmarks/aa-unpaired-h100-2026-11-25-rounds.csv

A paired A/A's per-case CSV (`--csv` below; docs/benchmarks/aa-*-paired*.csv) is enough to redo a
job's calibration by its identical binaries (`--from-csv`, nightly A/A: every row one binary): a
row's t-test needs only its mean log ratio, the variance of its round values and their count, which
its change, interval and rounds give; rounds are rebuilt with exactly those (the calibrated variance
taken as the rounds', which a rule that scales by the median z^2 maps onto its own answer). So a
change of that rule can be judged on the GPU measurements already taken:

    .venv/bin/python bench/aa_recompute.py --from-csv docs/benchmarks/aa-h100-2026-11-25-paired-3reps.csv

`--by-family` adds the p-values of all comparisons pooled per family and kind (GEMM's Triton cases,
attention's vendor controls, ...): how many fall under 0.05 and over 0.95 (5 % each expected) and
their KS test, which tells a family whose intervals are too narrow (p piled near 0) from one whose
are too wide (near 1), where the pooled test sees only a U.

`--leave-out-over BYTES` judges the chains without the cases whose buffers (inputs and outputs, as
kernels/ declares them now) are larger than BYTES: the cases that the per-case budget left on one
buffer copy (over 128 MiB at 256 MiB a case), so what the rest would say on their own, their run
level pooled without them, can be read off measurements taken before they got their copies.

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
from itertools import pairwise
from pathlib import Path
from typing import TypeVar

import numpy as np
from scipy.stats import kstest
from scipy.stats import t as student_t

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.results.analysis.stats import Verdict, paired_verdicts, threshold, verdicts  # noqa: E402
from pipeline.config import CompareSettings  # noqa: E402
from pipeline.contracts.rounds import DEFAULT_BLOCKS, round_values  # noqa: E402


ROUND_COPIES = 5
"""Samples a round is rebuilt from (`recompute_csv`, `load_rounds`): all alike, so its trimmed mean is its value."""


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
            items.append((np.ones(ROUND_COPIES * count), np.repeat(np.exp(levels), ROUND_COPIES),
                          [ROUND_COPIES] * count))
        cases = [row["case"] for row in table]
        found = paired_verdicts(items, min_change=CompareSettings().paired_min_change,
                                calibration=[True] * len(items), groups=_kinds(cases))
        reports.append(_summary(run, cases, found, rows))
    return reports


def _kinds(cases: list[str]) -> list[str]:
    return ["control" if c.endswith("/vendor") else "suite" for c in cases]


Side = tuple[np.ndarray, list[int]]
"""One case's samples in one job and its round sizes."""
Job = tuple[dict[str, Side], dict[str, str | None]]
"""One job's cases: their sides, and the digest of each binary timed (None: not recorded)."""
T = TypeVar("T")


def load_unpaired(path: Path) -> Job:
    """One job's dump: per case, its samples and rounds, and the digest of the binary timed."""
    dump = np.load(path)
    meta = json.loads(str(dump["meta"]))
    return ({m["case"]: (dump[f"h{i}"].astype(float), m["rounds"]) for i, m in enumerate(meta)},
            {m["case"]: m.get("digest") for m in meta})


def recompute_unpaired(name: str, base: Job, head: Job, rows: list[dict[str, object]] | None = None
                       ) -> dict[str, object]:
    """The summary of the head job's cases judged unpaired against the base job's (fresh series)."""
    cases = sorted(set(base[0]) & set(head[0]))
    # as compare.py: identical binaries in both runs carry a shift the runs share. Dumps written before
    # digests were recorded are of A/A jobs only (gpu_acceptance dumps no other): all identical
    same = [base[1][c] == head[1][c] for c in cases]
    settings = CompareSettings()
    limit = threshold(settings.min_change, settings.default_run_noise * 2 ** 0.5, settings.noise_factor)
    found = verdicts([(base[0][c], head[0][c]) for c in cases], min_change=limit,
                     default_run_noise=settings.default_run_noise,
                     groups=_kinds(cases), calibration=same)   # as compare.py
    return _summary(name, cases, found, rows)


def write_rounds(jobs: list[tuple[str, Path]], path: Path) -> None:
    """Each job's cases as their round values (the logs the statistics start from), a few kilobytes
    where the dumps are megabytes: enough to redo any round-level statistic later (`load_rounds`)."""
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["job", "case", "digest", "round_logs"])
        for name, dump in jobs:
            sides, digests = load_unpaired(dump)
            cases = sorted(sides)
            values, counts = round_values([sides[c] for c in cases], DEFAULT_BLOCKS, "log")
            for case, chunk in zip(cases, np.split(values, np.cumsum(counts)[:-1]), strict=True):
                writer.writerow([name, case, digests[case] or "", " ".join(f"{v:.10g}" for v in chunk)])


def load_rounds(path: Path) -> list[tuple[str, Job]]:
    """A `write_rounds` file's jobs in their order, each with rounds rebuilt from their values."""
    jobs: dict[str, Job] = {}
    with path.open() as source:
        for row in csv.DictReader(source):
            sides, digests = jobs.setdefault(row["job"], ({}, {}))
            logs = np.array([float(v) for v in row["round_logs"].split()])
            sides[row["case"]] = (np.repeat(np.exp(logs), ROUND_COPIES), [ROUND_COPIES] * len(logs))
            digests[row["case"]] = row["digest"] or None
    return list(jobs.items())


def _chains(jobs: list[tuple[str, T]]) -> list[list[tuple[str, T]]]:
    """Jobs named CHAIN/JOB (a folder per chain, as several GPUs of one host return them) kept apart."""
    chains: dict[str, list[tuple[str, T]]] = {}
    for name, job in jobs:
        chains.setdefault(name.rpartition("/")[0], []).append((name, job))
    return list(chains.values())


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


def family_table(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """The rows' p-values pooled per family and kind (a case id's first and last parts)."""
    groups: dict[tuple[str, str], list[float]] = {}
    for row in rows:   # a row's values are objects to the type checker: its p-value is a float (or None)
        if row["pvalue"] is not None:
            parts = str(row["case"]).split("/")
            groups.setdefault((parts[0], parts[-1]), []).append(float(row["pvalue"]))  # type: ignore[arg-type]
    return [{"family": family, "kind": kind, "pvalues": len(p), "under_0.05": sum(v < 0.05 for v in p),
             "over_0.95": sum(v > 0.95 for v in p), "ks_p": float(kstest(p, "uniform").pvalue)}
            for (family, kind), p in sorted(groups.items())]


def buffer_bytes(suite: Path) -> dict[str, int]:
    """Each case of the suite (every target) -> the bytes of its tensors."""
    from pipeline.build.suite_loader import load_suite

    return {str(c.case_id): sum(t.nbytes for t in c.tensors) for c in load_suite(suite)}


def leave_out(job: Job, cases: set[str]) -> Job:
    sides, digests = job
    return ({c: v for c, v in sides.items() if c not in cases}, {c: v for c, v in digests.items() if c not in cases})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dumps", nargs="+", type=Path)
    parser.add_argument("--unpaired", action="store_true",
                        help="dumps of separate jobs, in the order they ran: each judged against the one before "
                             "(dumps in different folders: a chain per folder)")
    parser.add_argument("--csv", type=Path, help="also write every case's verdict in every dump here")
    parser.add_argument("--rounds-csv", type=Path,
                        help="with --unpaired: also write every dump's round values here (for --from-rounds)")
    parser.add_argument("--from-csv", action="store_true",
                        help="the arguments are paired A/A CSVs (this script's --csv), not dumps: rebuild and recompute")
    parser.add_argument("--from-rounds", action="store_true",
                        help="the arguments are unpaired round files (--rounds-csv), not dumps: recompute each chain")
    parser.add_argument("--leave-out-over", type=int, metavar="BYTES",
                        help="with --unpaired or --from-rounds: judge without the cases whose buffers are larger")
    parser.add_argument("--by-family", action="store_true",
                        help="also pool the p-values of all comparisons per family and kind")
    args = parser.parse_args()
    if args.unpaired and len(args.dumps) < 2:
        parser.error("--unpaired takes two or more dumps: the first base job's, then each later job's")
    if args.rounds_csv and not args.unpaired:
        parser.error("--rounds-csv goes with --unpaired")
    if args.leave_out_over is not None and not (args.unpaired or args.from_rounds):
        parser.error("--leave-out-over goes with --unpaired or --from-rounds")
    sizes = buffer_bytes(Path(__file__).resolve().parents[1] / "kernels") if args.leave_out_over is not None else {}
    large = {case for case, size in sizes.items() if size > (args.leave_out_over or 0)}
    if large:
        print(f"left out where they appear: the {len(large)} cases of kernels/ (every target) with buffers over "
              f"{args.leave_out_over} bytes")
    rows: list[dict[str, object]] = []
    if args.from_csv:
        reports = [report for path in args.dumps for report in recompute_csv(path, rows)]
    elif args.from_rounds:
        jobs = [job for path in args.dumps for job in load_rounds(path)]
        jobs = [(name, leave_out(job, large)) for name, job in jobs]
        reports = [recompute_unpaired(name, base, head, rows)
                   for chain in _chains(jobs) for (_, base), (name, head) in pairwise(chain)]
    elif args.unpaired:
        several_folders = len({p.resolve().parent for p in args.dumps}) > 1
        named = [(f"{p.parent.name}/{p.stem}" if several_folders else p.stem, p) for p in args.dumps]
        if args.rounds_csv:
            write_rounds(named, args.rounds_csv)
        reports = [recompute_unpaired(name, leave_out(load_unpaired(base), large), leave_out(load_unpaired(head), large),
                                      rows)
                   for chain in _chains(named) for (_, base), (name, head) in pairwise(chain)]
    else:
        reports = [recompute(p, rows) for p in args.dumps]
    for report in reports:
        print(f"{report['dump']}: {report['cases']} cases")
        for group in ("suite", "vendor", "all"):
            g = report[group]
            assert isinstance(g, dict)
            print(f"  {group:6} {g['cases']:3} cases, flagged {g['flagged']}, largest |change| "
                  f"{100 * g['largest_abs_change']:.2f} %, KS D {g['ks_d']:.3f} p {g['ks_p']:.3g}, p = 1: {g['p_at_1']}")
    # a row's p-value is a float or None (`_summary`), an object to the type checker
    pvalues = [float(r["pvalue"]) for r in rows if r["pvalue"] is not None]  # type: ignore[arg-type]
    pooled = kstest(pvalues, "uniform")
    print(f"pooled: {len(pvalues)} p-values, KS D {pooled.statistic:.3f} p {pooled.pvalue:.3g}")
    if args.by_family:
        for g in family_table(rows):
            print(f"  {g['family']:15} {g['kind']:8} {g['pvalues']:4} p-values, under 0.05: {g['under_0.05']:3}, "
                  f"over 0.95: {g['over_0.95']:3}, KS p {g['ks_p']:.3g}")
    if args.csv:
        with args.csv.open("w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
