"""Calibration of the unpaired test's pooled run level on simulated suites (no GPU, seconds).

Each seed simulates 6 unpaired A/A comparisons of 82 suite cases and 82 vendor controls: per case its
own rounds' noise (0.2-2 %) and a run offset the rounds cannot see (suite: 2x the rounds' noise over
sqrt(rounds); controls: 3.5x). Printed: Kolmogorov-Smirnov p-values of each kind's A/A p-values against
uniform, pooled over all rows together and per kind (`stats.unpaired_estimates`' `groups`, as
`store/compare.py` does). Uniform p-values are what an A/A must give.

    .venv/bin/python bench/unpaired_calibration.py [--seeds 8]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from scipy.stats import kstest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.results.analysis.stats import unpaired_estimates  # noqa: E402

ROUNDS, PER_ROUND, CASES = 5, 40, 82


def comparison(rng: np.random.Generator, offset: float) -> list:
    """One unpaired A/A of `CASES` cases: (base, head) sides of (samples, round sizes)."""
    out = []
    for _ in range(CASES):
        noise = rng.uniform(0.002, 0.02)
        sides = []
        for _side in range(2):
            rounds = rng.normal(0, noise, ROUNDS) + rng.normal(0, offset * noise / math.sqrt(ROUNDS))
            sides.append((1e-3 * np.exp(np.repeat(rounds, PER_ROUND) + rng.normal(0, 0.002, ROUNDS * PER_ROUND)),
                          [PER_ROUND] * ROUNDS))
        out.append(tuple(sides))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    args = parser.parse_args()
    print("seed | KS p, pooled together: suite / controls | KS p, pooled per kind: suite / controls")
    for seed in range(1, args.seeds + 1):
        rng = np.random.default_rng(seed)
        mixed = [comparison(rng, 2.0) + comparison(rng, 3.5) for _ in range(6)]
        groups = ["suite"] * CASES + ["control"] * CASES
        together = [unpaired_estimates(m, default_run_noise=0.03) for m in mixed]
        apart = [unpaired_estimates(m, default_run_noise=0.03, groups=groups) for m in mixed]

        def ks(estimates: list, part: slice) -> float:
            return float(kstest([e.pvalue for es in estimates for e in es[part]], "uniform").pvalue)

        suite, controls = slice(0, CASES), slice(CASES, 2 * CASES)
        print(f"{seed} | {ks(together, suite):.2g} / {ks(together, controls):.2g} | "
              f"{ks(apart, suite):.2g} / {ks(apart, controls):.2g}")


if __name__ == "__main__":
    main()
