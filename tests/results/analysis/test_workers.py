"""The analysis workers (real spawned processes) answer what `changepoints.analyse` answers in the
calling process, each series on its own worker from batch to batch."""

from __future__ import annotations

import random

import numpy as np

from pipeline.config import AnalysisSettings
from pipeline.results.analysis import changepoints, workers

SETTINGS = AnalysisSettings()


def history(rng: random.Random, n: int) -> np.ndarray:
    level = np.ones(n)
    for _ in range(rng.randint(0, 3)):
        level[rng.randrange(n):] *= 1 + rng.choice([-1, 1]) * rng.uniform(0.05, 0.2)
    values = level * (1 + 0.01 * np.array([rng.gauss(0, 1) for _ in range(n)]))
    for _ in range(rng.randint(0, 3)):
        values[rng.randrange(1, n - 1)] *= 1.5
    return values


def test_workers_answer_as_the_calling_process_does() -> None:
    rng = random.Random(7)
    jobs = [workers.Job(series_id, history(rng, 120), 0.02 if series_id % 3 else 0.05)
            for series_id in range(1, workers.MIN_PARALLEL + 41)]
    here = workers.Workers(1).analyse(jobs, SETTINGS)
    pool = workers.Workers(2)
    try:
        spread = pool.analyse(jobs, SETTINGS)
        again = pool.analyse(jobs[::-1], SETTINGS)   # another batch, another order: the same answers
        assert pool._pools, "a batch this large is analysed on the workers"
    finally:
        pool.shutdown()
    assert spread == here and again == here
    found = [a for a in here.values() if a.confirmed]
    assert len(found) > 50, "the histories have steps: the comparison covers confirmed points"
    direct = changepoints.analyse(jobs[0].values, min_magnitude=jobs[0].min_magnitude)
    assert here[jobs[0].series_id] == direct


def test_a_small_batch_is_analysed_in_the_calling_process() -> None:
    rng = random.Random(8)
    jobs = [workers.Job(i, history(rng, 60), 0.02) for i in range(5)]
    pool = workers.Workers(2)
    answers = pool.analyse(jobs, SETTINGS)
    assert not pool._pools and set(answers) == set(range(5))
