"""Detection quality: our change-point detector against Apache Otava and Dana on labelled series.

    .venv/bin/python bench/detection_quality.py [--series N] [--seed S] [--out results.json]

Needs the `bench` extra (`pip install -e .[bench]`: apache-otava).

Series (all deterministic from --seed): LENGTH commits around a level of 100, multiplicative
Gaussian noise of NOISE_LEVELS (0.5, 1, 2, 5 %); --series N series per noise level, cycling
through the scenarios:
- step:      one step of STEP_SIZES (1, 2, 3, 5, 10, 20 %, up or down) at a commit in [60, 140];
- two_steps: two such steps, at [40, 80] and [120, 160];
- outliers:  one step, plus OUTLIERS single slow commits (+15 to +50 %) away from the step;
- bimodal:   one step; the noise is bimodal: a commit lands in a second mode 2 sigma slower with
             probability 0.3, with sigma / 2 of Gaussian noise within each mode;
- drift:     no step; a linear drift of 5 to 15 % (up or down) over 60 to 100 commits from commit 50;
- noise:     no change at all.

Scoring, per detector, on the whole series:
- a detection at d matches a true change at t when |d - t| <= TOLERANCE (2 commits); each true
  change matches at most one detection (the nearest), each detection at most one change;
- unmatched true changes are false negatives; unmatched detections are false positives, except
  the first detection inside a drift (from its start to TOLERANCE past its end), which counts as
  neither: a drift is a real change of level that a detector may flag once, but it has no culprit
  commit, and every further detection inside it is a false alarm (a drift cut into many steps is
  penalised, one flag is not rewarded either);
- precision, recall and F1 over all series of a noise level, and over everything.

Delay (the online view: commits arrive one at a time): for every true step of at least 3 noise
standard deviations, the detector is run on the history up to t + d for d = 0, 1, ... MAX_DELAY and
the delay is the first d at which a detection matches t (None when none by MAX_DELAY). Delay 0
means flagged when the first commit at the new level arrives.

Detectors, each with its defaults and the same settings for every series:
- ours:  pipeline.results.changepoints.detect (window 50, max p 0.001, min_size 3);
- otava: otava.analysis.compute_change_points(series, window_len=50, max_pvalue=0.001,
         min_magnitude=0.0), Otava's own library entry point (its CLI defaults);
- dana:  pipeline.results.changepoints.dana_running_average (range 5 %, required 2).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from pipeline.results.changepoints import dana_running_average, detect

LENGTH = 200
NOISE_LEVELS = (0.005, 0.01, 0.02, 0.05)
STEP_SIZES = (0.01, 0.02, 0.03, 0.05, 0.10, 0.20)
SCENARIOS = ("step", "two_steps", "outliers", "bimodal", "drift", "noise")
OUTLIERS = 4
TOLERANCE = 2
MAX_DELAY = 15
BIG_STEP_SIGMAS = 3.0


@dataclass
class Series:
    noise: float
    scenario: str
    values: np.ndarray
    changes: list[int]
    sizes: list[float]
    """Relative size of each change (signed)."""
    drifts: list[tuple[int, int]] = field(default_factory=list)
    """(first, last) commit of each drift."""


def make_series(rng: np.random.Generator, noise: float, scenario: str) -> Series:
    level = np.full(LENGTH, 100.0)
    changes: list[int] = []
    sizes: list[float] = []
    drifts: list[tuple[int, int]] = []

    def step(lo: int, hi: int) -> None:
        at = int(rng.integers(lo, hi + 1))
        size = float(rng.choice(STEP_SIZES)) * float(rng.choice((-1.0, 1.0)))
        level[at:] *= 1.0 + size
        changes.append(at)
        sizes.append(size)

    if scenario in ("step", "outliers", "bimodal"):
        step(60, 140)
    elif scenario == "two_steps":
        step(40, 80)
        step(120, 160)
    elif scenario == "drift":
        span = int(rng.integers(60, 101))
        total = float(rng.uniform(0.05, 0.15)) * float(rng.choice((-1.0, 1.0)))
        ramp = np.clip((np.arange(LENGTH) - 50) / span, 0.0, 1.0)
        level *= 1.0 + total * ramp
        drifts.append((50, 50 + span))

    if scenario == "bimodal":
        mode = rng.random(LENGTH) < 0.3
        eps = noise / 2 * rng.standard_normal(LENGTH) + 2 * noise * mode
    else:
        eps = noise * rng.standard_normal(LENGTH)
    values = level * (1.0 + eps)
    if scenario == "outliers":
        allowed = [i for i in range(LENGTH) if all(abs(i - c) > 3 for c in changes)]
        for i in rng.choice(allowed, size=OUTLIERS, replace=False):
            values[i] *= 1.0 + float(rng.uniform(0.15, 0.50))
    return Series(noise, scenario, values, changes, sizes, drifts)


def make_suite(n_per_noise: int, seed: int) -> list[Series]:
    rng = np.random.default_rng(seed)
    return [
        make_series(rng, noise, SCENARIOS[i % len(SCENARIOS)])
        for noise in NOISE_LEVELS
        for i in range(n_per_noise)
    ]


# Detectors: values -> indices of the first commit of each new level.


def ours(values: np.ndarray) -> list[int]:
    return [cp.index for cp in detect(values)]


def otava(values: np.ndarray) -> list[int]:
    from otava.analysis import compute_change_points

    cps, _ = compute_change_points(list(map(float, values)), window_len=50, max_pvalue=0.001, min_magnitude=0.0)
    return [int(cp.index) for cp in cps]


def dana(values: np.ndarray) -> list[int]:
    return dana_running_average(values)


DETECTORS: dict[str, Callable[[np.ndarray], list[int]]] = {"ours": ours, "otava": otava, "dana": dana}


def match(changes: list[int], found: list[int]) -> dict[int, int]:
    """True change index -> matched detection, nearest first, within TOLERANCE."""
    pairs = sorted(
        (abs(d - t), t, d) for t in changes for d in found if abs(d - t) <= TOLERANCE
    )
    matched: dict[int, int] = {}
    used: set[int] = set()
    for _, t, d in pairs:
        if t not in matched and d not in used:
            matched[t] = d
            used.add(d)
    return matched


def score(series: Series, found: list[int]) -> tuple[int, int, int]:
    """(true positives, false positives, false negatives) of one series."""
    matched = match(series.changes, found)
    used = set(matched.values())
    fp = 0
    drift_free = {d: True for d in series.drifts}
    for d in sorted(set(found) - used):
        region = next((r for r in series.drifts if r[0] <= d <= r[1] + TOLERANCE), None)
        if region is not None and drift_free[region]:
            drift_free[region] = False
            continue
        fp += 1
    tp = len(matched)
    return tp, fp, len(series.changes) - tp


def delay(series: Series, t: int, detector: Callable[[np.ndarray], list[int]]) -> int | None:
    for d in range(MAX_DELAY + 1):
        end = t + d + 1
        if end > LENGTH:
            return None
        if any(abs(i - t) <= TOLERANCE for i in detector(series.values[:end])):
            return d
    return None


def prf(tp: int, fp: int, fn: int) -> dict[str, float]:
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return {"tp": tp, "fp": fp, "fn": fn, "precision": p, "recall": r, "f1": f1}


def run(n_per_noise: int, seed: int) -> dict:
    suite = make_suite(n_per_noise, seed)
    out: dict = {"series": len(suite), "seed": seed, "length": LENGTH, "tolerance": TOLERANCE, "detectors": {}}
    for name, fn in DETECTORS.items():
        t0 = time.perf_counter()
        counts: dict[str, list[int]] = {}
        big_delays: dict[str, list[int | None]] = {}
        for s in suite:
            found = fn(s.values)
            tp, fp, fn_ = score(s, found)
            for key in (f"noise={s.noise:g}", f"scenario={s.scenario}", "all"):
                c = counts.setdefault(key, [0, 0, 0])
                c[0] += tp
                c[1] += fp
                c[2] += fn_
            for t, size in zip(s.changes, s.sizes):
                if abs(size) >= BIG_STEP_SIGMAS * s.noise:
                    big_delays.setdefault(f"noise={s.noise:g}", []).append(delay(s, t, fn))
        elapsed = time.perf_counter() - t0
        delays = {k: _delay_summary(v) for k, v in big_delays.items()}
        delays["all"] = _delay_summary([d for v in big_delays.values() for d in v])
        out["detectors"][name] = {
            "scores": {k: prf(*v) for k, v in counts.items()},
            "delay_big_steps": delays,
            "seconds": elapsed,
        }
    return out


def _delay_summary(delays: list[int | None]) -> dict:
    got = sorted(d for d in delays if d is not None)
    return {
        "steps": len(delays),
        "within_2": sum(d <= 2 for d in got) / len(delays) if delays else None,
        "median": float(np.median(got)) if got else None,
        "p90": float(np.percentile(got, 90)) if got else None,
        "missed": len(delays) - len(got),
    }


def markdown(result: dict) -> str:
    names = list(result["detectors"])
    keys = [f"noise={n:g}" for n in NOISE_LEVELS] + [f"scenario={s}" for s in SCENARIOS] + ["all"]
    lines = [
        "| slice | " + " | ".join(f"{n} P / R / F1" for n in names) + " | F1 ours / otava |",
        "|---|" + "---|" * (len(names) + 1),
    ]
    for key in keys:
        cells = []
        for n in names:
            s = result["detectors"][n]["scores"][key]
            cells.append(f"{s['precision']:.2f} / {s['recall']:.2f} / {s['f1']:.2f}")
        f_ours = result["detectors"]["ours"]["scores"][key]["f1"]
        f_otava = result["detectors"]["otava"]["scores"][key]["f1"]
        ratio = f"{f_ours / f_otava:.2f}" if f_otava else "n/a"
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {ratio} |")
    lines += [
        "",
        f"Online delay (commits after the step until flagged, steps >= {BIG_STEP_SIGMAS:g} sigma):",
        "",
        "| slice | " + " | ".join(f"{n} <=2 / median / p90 / missed" for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for key in [f"noise={n:g}" for n in NOISE_LEVELS] + ["all"]:
        cells = []
        for n in names:
            d = result["detectors"][n]["delay_big_steps"].get(key)
            if not d or not d["steps"]:
                cells.append("-")
                continue
            cells.append(f"{d['within_2']:.2f} / {d['median']} / {d['p90']} / {d['missed']}/{d['steps']}")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    lines += ["", "Seconds per detector: " + ", ".join(f"{n} {result['detectors'][n]['seconds']:.1f}" for n in names)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=200, help="series per noise level (default 200)")
    parser.add_argument("--seed", type=int, default=20261121)
    parser.add_argument("--out", help="write the full results as JSON here")
    args = parser.parse_args(argv)
    result = run(args.series, args.seed)
    result["machine"] = {"python": platform.python_version(), "platform": platform.platform()}
    print(markdown(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
