"""Detection quality: our change-point detector, batch and online (the store fed one commit at a
time), against Apache Otava and Dana on labelled series.

    PYTHONPATH=. .venv/bin/python bench/detection_quality.py [--series N] [--seed S] [--out results.json]

Needs the `bench` extra (`pip install -e .[bench]`: apache-otava).

Series (all deterministic from --seed): LENGTH commits around a level of 100, multiplicative
noise of NOISE_LEVELS (0.5, 1, 2, 5 %); --series N series per noise level, cycling through the
kinds (issue 13's list):
- step:          one step of STEP_SIZES (1, 2, 3, 5, 10, 20 %, up or down) at a commit in [60, 140];
- two_steps:     two such steps, at [40, 80] and [120, 160];
- staircase:     two steps the same way, the second 25 to 40 commits after the first;
- slowdown_fix:  a step up, then back down (the fix) 5 to 30 commits later;
- outliers:      one step, plus OUTLIERS single slow commits (+15 to +50 %) away from the step;
- heavy_tails:   one step under Student-t noise (3 degrees of freedom, scaled to the noise level);
- bimodal:       one step; bimodal clock states: a commit lands in a second mode 2 sigma slower
                 with probability 0.3, with sigma / 2 of Gaussian noise within each mode;
- drift:         no step; a linear drift of 5 to 15 % (up or down) over 60 to 100 commits from
                 commit 50, or (every other one) a slow one of 2 % over the whole series;
- noise, outliers_only, bimodal_only: no step (pure noise; outliers; bimodal clock states).

Scoring, per detector, on the whole series:
- a detection at d matches a true change at t when |d - t| <= TOLERANCE (2 commits); each true
  change matches at most one detection (the nearest), each detection at most one change;
- unmatched true changes are false negatives; unmatched detections are false positives, except
  the first detection inside a drift (from its start to TOLERANCE past its end), which counts as
  neither: a drift is a real change of level that a detector may flag once, but it has no culprit
  commit, and every further detection inside it is a false alarm;
- precision, recall and F1 over all series of a noise level, of a kind, and over everything;
  false change points per 100 commits on the no-step kinds.

Delay (commits arrive one at a time): for every true step of at least 3 noise standard
deviations, the first d at which a detection at commit t + d matches t (None when none by
MAX_DELAY). Batch detectors are run on the history up to t + d. The online path reads what the
store holds after commit t + d: a suspected or confirmed point counts if a confirmed one matching
t is stored later (issue 13: "suspected counts if it is then confirmed").

Along the way (the store after each commit, as its alerts see it; issue 31): per noise level, the
regressions (rises) the store ever confirmed and how many of them match no true change (per 100
commits), how many confirmed regressions stopped being confirmed later (each one an alert
withdrawn: counted per stored row, so a point that moves to a neighbouring commit is not one), the
steps of at least 3 noise standard deviations that were confirmed and later not (withdrawn), and
the confirmation delay: the first d at which a confirmed point matching a big step at t stands
after commit t + d. Beside them the final state's and Otava's F1 and false regressions per 100
commits (for detectors that report no levels, a point is a rise when the median of the 5 commits
from it is above that of the 5 before it).

Detectors, the same settings for every series:
- batch:    pipeline.results.analysis.changepoints.analyse(...).confirmed with the store's defaults
            (AnalysisSettings: window 50, max p 0.001, min magnitude 0.02, min_size 3, confirmation
            after 8 commits at p <= 1e-8): what the store confirms, less its hysteresis;
- reported: changepoints.detect with the same settings: every point the detector reports, the
            confirmation rule left out (the store shows the unconfirmed ones as suspected);
- online:   the store: bench/_online_store.py feeds each noise level's series one commit at a
            time through ingest.ingest_result into a SQLite store (push runs, default analysis)
            and reads the standing change points after every commit; scored on the confirmed
            ones standing at the end, and also on every one it ever confirmed ("online, ever":
            each stored point once, at the commit where it was first confirmed, which is what its
            alert named; a point that later moves a commit keeps its row and its alert);
- otava:    otava.analysis.compute_change_points(series, window_len=50, max_pvalue=0.001,
            min_magnitude=0.0), Otava's own library entry point (its CLI defaults), and
  otava_mm: the same with min_magnitude=0.02 (the store's minimum magnitude);
- dana:     pipeline.results.analysis.changepoints.dana_running_average (range 5 %, required 2).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from _online_store import Timeline, online_timelines

from pipeline.config import AnalysisSettings
from pipeline.results.analysis.changepoints import analyse, dana_running_average, detect

LENGTH = 200
NOISE_LEVELS = (0.005, 0.01, 0.02, 0.05)
STEP_SIZES = (0.01, 0.02, 0.03, 0.05, 0.10, 0.20)
SCENARIOS = ("step", "two_steps", "staircase", "slowdown_fix", "outliers", "heavy_tails", "bimodal", "drift",
             "noise", "outliers_only", "bimodal_only")
NO_STEP = ("drift", "noise", "outliers_only", "bimodal_only")
STORE = AnalysisSettings()
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

    def step(lo: int, hi: int, size: float | None = None) -> int:
        at = int(rng.integers(lo, hi + 1))
        if size is None:
            size = float(rng.choice(STEP_SIZES)) * float(rng.choice((-1.0, 1.0)))
        level[at:] *= 1.0 + size
        changes.append(at)
        sizes.append(size)
        return at

    if scenario in ("step", "outliers", "bimodal", "heavy_tails"):
        step(60, 140)
    elif scenario == "two_steps":
        step(40, 80)
        step(120, 160)
    elif scenario == "staircase":
        sign = float(rng.choice((-1.0, 1.0)))
        first = step(40, 70, float(rng.choice(STEP_SIZES)) * sign)
        step(first + 25, first + 40, float(rng.choice(STEP_SIZES)) * sign)
    elif scenario == "slowdown_fix":
        size = float(rng.choice(STEP_SIZES))
        first = step(50, 120, size)
        step(first + 5, first + 30, 1.0 / (1.0 + size) - 1.0)
    elif scenario == "drift":
        if rng.random() < 0.5:
            span = int(rng.integers(60, 101))
            total = float(rng.uniform(0.05, 0.15)) * float(rng.choice((-1.0, 1.0)))
            ramp = np.clip((np.arange(LENGTH) - 50) / span, 0.0, 1.0)
            drifts.append((50, 50 + span))
        else:  # issue 13's fault 7: +-2 % over the whole series
            total = 0.02 * float(rng.choice((-1.0, 1.0)))
            ramp = np.arange(LENGTH) / (LENGTH - 1)
            drifts.append((0, LENGTH - 1))
        level *= 1.0 + total * ramp

    if scenario in ("bimodal", "bimodal_only"):
        mode = rng.random(LENGTH) < 0.3
        eps = noise / 2 * rng.standard_normal(LENGTH) + 2 * noise * mode
    elif scenario == "heavy_tails":
        eps = noise / math.sqrt(3.0) * rng.standard_t(3, LENGTH)  # unit variance times the noise
    else:
        eps = noise * rng.standard_normal(LENGTH)
    values = level * np.exp(eps)
    if scenario in ("outliers", "outliers_only"):
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


def batch(values: np.ndarray) -> list[int]:
    return [cp.index for cp in analyse(values, window=STORE.window, max_pvalue=STORE.max_pvalue,
                                       min_magnitude=STORE.min_magnitude, min_size=STORE.min_size,
                                       confirm_size=STORE.confirm_size, confirm_pvalue=STORE.confirm_pvalue).confirmed]


def reported(values: np.ndarray) -> list[int]:
    return [cp.index for cp in detect(values, window=STORE.window, max_pvalue=STORE.max_pvalue,
                                      min_magnitude=STORE.min_magnitude, min_size=STORE.min_size)]


def _otava(values: np.ndarray, min_magnitude: float) -> list[int]:
    from otava.analysis import compute_change_points

    cps, _ = compute_change_points(list(map(float, values)), window_len=50, max_pvalue=0.001,
                                   min_magnitude=min_magnitude)
    return [int(cp.index) for cp in cps]


def otava(values: np.ndarray) -> list[int]:
    return _otava(values, 0.0)


def otava_mm(values: np.ndarray) -> list[int]:
    return _otava(values, STORE.min_magnitude)


def dana(values: np.ndarray) -> list[int]:
    return dana_running_average(values)


DETECTORS: dict[str, Callable[[np.ndarray], list[int]]] = {"batch": batch, "reported": reported, "otava": otava,
                                                            "otava_mm": otava_mm, "dana": dana}


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


def false_points(series: Series, found: list[int]) -> set[int]:
    """The detections that match no true change (the first one inside each drift excepted: module doc)."""
    used = set(match(series.changes, found).values())
    false: set[int] = set()
    drift_free = {d: True for d in series.drifts}
    for d in sorted(set(found) - used):
        region = next((r for r in series.drifts if r[0] <= d <= r[1] + TOLERANCE), None)
        if region is not None and drift_free[region]:
            drift_free[region] = False
            continue
        false.add(d)
    return false


def score(series: Series, found: list[int]) -> tuple[int, int, int]:
    """(true positives, false positives, false negatives) of one series."""
    tp = len(match(series.changes, found))
    return tp, len(false_points(series, found)), len(series.changes) - tp


def rises(values: np.ndarray, d: int) -> bool:
    """Whether the level rises at d (a regression of a latency): the median of the up to 5 commits
    from d against that of the up to 5 before it (for detectors that report no levels)."""
    return bool(np.median(values[d:d + 5]) > np.median(values[max(0, d - 5):d])) if d > 0 else False


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


class Tally:
    """Scores of one detector: P/R/F1 counts by slice, false points on no-step kinds, delays."""

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}
        self.no_step: dict[str, list[int]] = {}
        """kind -> [false points, commits]"""
        self.delays: dict[str, list[int | None]] = {}
        self.false_regressions: dict[str, list[int]] = {}
        """noise slice -> [false regressions, commits]"""

    def add(self, s: Series, found: list[int], delays: list[int | None], rising: set[int] | None = None) -> None:
        """`rising`: the found points that are rises (regressions of a latency); None: judged from the values."""
        tp, fp, fn = score(s, found)
        rising = rising if rising is not None else {d for d in found if rises(s.values, d)}
        for key in (f"noise={s.noise:g}", "all"):
            r = self.false_regressions.setdefault(key, [0, 0])
            r[0] += len(false_points(s, found) & rising)
            r[1] += LENGTH
        for key in (f"noise={s.noise:g}", f"scenario={s.scenario}", "all"):
            c = self.counts.setdefault(key, [0, 0, 0])
            c[0] += tp
            c[1] += fp
            c[2] += fn
        if s.scenario in NO_STEP:
            n = self.no_step.setdefault(s.scenario, [0, 0])
            n[0] += fp
            n[1] += LENGTH
        big = [t for t, size in zip(s.changes, s.sizes) if abs(size) >= BIG_STEP_SIGMAS * s.noise]
        if len(delays) != len(big):
            raise ValueError("one delay per big step")
        self.delays.setdefault(f"noise={s.noise:g}", []).extend(delays)

    def summary(self, seconds: float) -> dict:
        delays = {k: _delay_summary(v) for k, v in self.delays.items()}
        delays["all"] = _delay_summary([d for v in self.delays.values() for d in v])
        return {"scores": {k: prf(*v) for k, v in self.counts.items()}, "delay_big_steps": delays,
                "false_per_100_commits": {k: 100.0 * fp / n for k, (fp, n) in self.no_step.items()},
                "false_regressions_per_100_commits": {k: 100.0 * fp / n
                                                      for k, (fp, n) in self.false_regressions.items()},
                "seconds": seconds}


def big_steps(s: Series) -> list[int]:
    return [t for t, size in zip(s.changes, s.sizes) if abs(size) >= BIG_STEP_SIGMAS * s.noise]


def online_delay(timeline: Timeline, t: int) -> int | None:
    """First d at which the store, after commit t + d, holds a point matching t (suspected or
    confirmed) that is confirmed then or later (module doc)."""
    confirmed_from = next((i for i, points in enumerate(timeline)
                           if any(abs(j - t) <= TOLERANCE and life == "confirmed" for j, life, _, _ in points)), None)
    if confirmed_from is None:
        return None
    for d in range(MAX_DELAY + 1):  # the first sighting is at or before confirmed_from
        if t + d < len(timeline) and any(abs(j - t) <= TOLERANCE for j, _, _, _ in timeline[t + d]):
            return d
    return None


def first_confirmed(timeline: Timeline) -> dict[int, tuple[int, str]]:
    """Stored row -> (commit, direction) where it was first confirmed: what its alert announced."""
    out: dict[int, tuple[int, str]] = {}
    for points in timeline:
        for j, life, direction, row in points:
            if life == "confirmed":
                out.setdefault(row, (j, direction))
    return out


class AlongTheWay:
    """What the store confirmed commit by commit, as the alerts see it (module doc, "Along the way")."""

    def __init__(self) -> None:
        self.slices: dict[str, dict[str, list]] = {}

    def add(self, s: Series, timeline: Timeline) -> None:
        confirmed = [{(j, direction, row) for j, life, direction, row in points if life == "confirmed"}
                     for points in timeline]
        announced = first_confirmed(timeline)
        ever = sorted({j for j, _ in announced.values()})
        regressions = {j for j, direction in announced.values() if direction == "regression"}
        # an alert is withdrawn when its row stops being confirmed (a row that moves keeps its alert)
        rows = [{row for _, direction, row in points if direction == "regression"} for points in confirmed]
        withdrawn = len({row for before, after in zip(rows, rows[1:]) for row in before - after})
        big_withdrawn = 0
        delays: list[int | None] = []
        for t in big_steps(s):
            held = [any(abs(j - t) <= TOLERANCE for j, _, _ in points) for points in confirmed]
            if True in held:
                first = held.index(True)
                delays.append(first - t)
                big_withdrawn += not all(held[first:])
            else:
                delays.append(None)
        for key in (f"noise={s.noise:g}", "all"):
            c = self.slices.setdefault(key, {"counts": [0] * 6, "delays": []})
            c["counts"][0] += len(regressions)
            c["counts"][1] += len(false_points(s, ever) & regressions)
            c["counts"][2] += withdrawn
            c["counts"][3] += big_withdrawn
            c["counts"][4] += sum(d is not None for d in delays)
            c["counts"][5] += LENGTH
            c["delays"].extend(delays)

    def summary(self) -> dict:
        out = {}
        for key, c in self.slices.items():
            regressions, false, withdrawn, big_withdrawn, big_confirmed, commits = c["counts"]
            got = sorted(d for d in c["delays"] if d is not None)
            out[key] = {"regressions": regressions, "false_regressions": false,
                        "false_regressions_per_100_commits": 100.0 * false / commits, "alerts_withdrawn": withdrawn,
                        "big_steps_confirmed": big_confirmed, "big_steps_withdrawn": big_withdrawn,
                        "confirmation_delay_median": float(np.median(got)) if got else None,
                        "confirmation_delay_p90": float(np.percentile(got, 90)) if got else None,
                        "big_steps": len(c["delays"])}
        return out


def run(n_per_noise: int, seed: int) -> dict:
    suite = make_suite(n_per_noise, seed)
    out: dict = {"series": len(suite), "seed": seed, "length": LENGTH, "tolerance": TOLERANCE, "detectors": {}}
    for name, fn in DETECTORS.items():
        t0 = time.perf_counter()
        tally = Tally()
        for s in suite:
            tally.add(s, fn(s.values), [delay(s, t, fn) for t in big_steps(s)])
        out["detectors"][name] = tally.summary(time.perf_counter() - t0)
    t0 = time.perf_counter()
    final, ever, along = Tally(), Tally(), AlongTheWay()
    retracted = 0
    for noise in NOISE_LEVELS:
        group = [s for s in suite if s.noise == noise]
        for s, timeline in zip(group, online_timelines([s.values for s in group], STORE), strict=True):
            end = [j for j, life, _, _ in timeline[-1] if life == "confirmed"]
            end_rising = {j for j, life, direction, _ in timeline[-1]
                          if life == "confirmed" and direction == "regression"}
            announced = first_confirmed(timeline)
            once = sorted({j for j, _ in announced.values()})
            once_rising = {j for j, direction in announced.values() if direction == "regression"}
            retracted += len(set(once) - set(end))
            delays = [online_delay(timeline, t) for t in big_steps(s)]
            final.add(s, end, delays, end_rising)
            ever.add(s, once, delays, once_rising)
            along.add(s, timeline)
    seconds = time.perf_counter() - t0
    out["detectors"]["online"] = final.summary(seconds)
    out["detectors"]["online, ever"] = ever.summary(seconds)
    out["online_confirmed_then_retracted"] = retracted
    out["along_the_way"] = along.summary()
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


NAMES = ("online", "online, ever", "batch", "reported", "otava", "otava_mm", "dana")


def markdown(result: dict) -> str:
    det = result["detectors"]
    names = [n for n in NAMES if n in det]
    keys = [f"noise={n:g}" for n in NOISE_LEVELS] + [f"scenario={s}" for s in SCENARIOS] + ["all"]
    lines = [
        "| slice | " + " | ".join(f"{n} P / R / F1" for n in names) + " | F1 online / batch | F1 online / best Otava |",
        "|---|" + "---|" * (len(names) + 2),
    ]
    for key in keys:
        cells = []
        for n in names:
            s = det[n]["scores"][key]
            cells.append(f"{s['precision']:.2f} / {s['recall']:.2f} / {s['f1']:.2f}")
        f_online = det["online"]["scores"][key]["f1"]
        f_batch = det["batch"]["scores"][key]["f1"]
        f_otava = max(det["otava"]["scores"][key]["f1"], det["otava_mm"]["scores"][key]["f1"])
        ratio = f"{f_online / f_batch:.2f}" if f_batch else "n/a"
        vs = f"{f_online / f_otava:.2f}" if f_otava else "n/a"
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {ratio} | {vs} |")
    lines += ["", "False change points per 100 commits on series with no step:", "",
              "| kind | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for kind in NO_STEP:
        lines.append(f"| {kind} | " + " | ".join(f"{det[n]['false_per_100_commits'].get(kind, 0):.3f}"
                                                 for n in names) + " |")
    lines += [
        "",
        f"Delay (commits after the step until flagged, steps >= {BIG_STEP_SIGMAS:g} sigma; online: suspected "
        "or confirmed, when then confirmed):",
        "",
        "| slice | " + " | ".join(f"{n} <=2 / median / p90 / missed" for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for key in [f"noise={n:g}" for n in NOISE_LEVELS] + ["all"]:
        cells = []
        for n in names:
            d = det[n]["delay_big_steps"].get(key)
            if not d or not d["steps"] or d["median"] is None:
                cells.append("-")
                continue
            cells.append(f"{d['within_2']:.2f} / {d['median']:g} / {d['p90']:.1f} / {d['missed']}/{d['steps']}")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    lines += ["", "False regressions per 100 commits (a rise matching no true change; online, ever: every "
              "one the store ever confirmed, what the alerts sent):", "",
              "| slice | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for key in [f"noise={n:g}" for n in NOISE_LEVELS] + ["all"]:
        lines.append(f"| {key} | " + " | ".join(f"{det[n]['false_regressions_per_100_commits'].get(key, 0):.3f}"
                                                for n in names) + " |")
    along = result["along_the_way"]
    lines += ["", "Along the way (the store after each commit; alerts go out on confirmation):", "",
              "| slice | F1 final / ever / gap | regressions confirmed / false / per 100 commits | alerts withdrawn "
              f"| steps >= {BIG_STEP_SIGMAS:g} sigma confirmed / withdrawn / missed | confirmation delay median / p90 "
              "| F1 batch / best Otava | false regressions per 100 commits, final / Otava / Otava mm |",
              "|---|---|---|---|---|---|---|---|"]
    for key in [f"noise={n:g}" for n in NOISE_LEVELS] + ["all"]:
        a = along[key]
        f_final, f_ever = det["online"]["scores"][key]["f1"], det["online, ever"]["scores"][key]["f1"]
        f_otava = max(det["otava"]["scores"][key]["f1"], det["otava_mm"]["scores"][key]["f1"])
        fr = [det[n]["false_regressions_per_100_commits"].get(key, 0) for n in ("online", "otava", "otava_mm")]
        median = "-" if a["confirmation_delay_median"] is None else f"{a['confirmation_delay_median']:g}"
        p90 = "-" if a["confirmation_delay_p90"] is None else f"{a['confirmation_delay_p90']:.1f}"
        lines.append(
            f"| {key} | {f_final:.3f} / {f_ever:.3f} / {f_final - f_ever:+.3f} | {a['regressions']} / "
            f"{a['false_regressions']} / {a['false_regressions_per_100_commits']:.3f} | {a['alerts_withdrawn']} | "
            f"{a['big_steps_confirmed']} / {a['big_steps_withdrawn']} / {a['big_steps'] - a['big_steps_confirmed']} | "
            f"{median} / {p90} | {det['batch']['scores'][key]['f1']:.3f} / {f_otava:.3f} | "
            f"{fr[0]:.3f} / {fr[1]:.3f} / {fr[2]:.3f} |")
    lines += ["", f"Points the store confirmed and later retracted: {result['online_confirmed_then_retracted']}",
              "Seconds per detector: " + ", ".join(f"{n} {det[n]['seconds']:.1f}" for n in names if n != "online, ever")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=110, help="series per noise level (default 110: 10 per kind)")
    parser.add_argument("--seed", type=int, default=20261121)
    parser.add_argument("--out", help="write the full results as JSON here")
    parser.add_argument("--before-issue-31", action="store_true",
                        help="the baseline: confirm what the detector reports (confirm_size = min_size, confirm_pvalue "
                             "= max_pvalue) and no hysteresis (hold_pvalue 1e-300), as before issue 31")
    args = parser.parse_args(argv)
    if args.before_issue_31:
        global STORE
        STORE = STORE.model_copy(update={"confirm_size": STORE.min_size, "confirm_pvalue": STORE.max_pvalue,
                                         "hold_pvalue": 1e-300})
    result = run(args.series, args.seed)
    result["machine"] = {"python": platform.python_version(), "platform": platform.platform()}
    print(markdown(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
