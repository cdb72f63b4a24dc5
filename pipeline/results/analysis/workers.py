"""Change-point analyses of many series at once, spread over worker processes.

`changepoints.analyse` is pure Python over small arrays, so threads would queue on the interpreter
lock; an upload of 2,000 cases has 2,000 independent analyses, which worker processes share. Each
series always goes to the same worker (its id modulo their count), so that worker's memo of window
splits and candidate tests stays warm for it from upload to upload (`changepoints._remembered`).
Workers are spawned (not forked from a threaded service) on first use and kept for the process'
life; a batch smaller than `MIN_PARALLEL` is analysed here, and so is one whose worker died (the
answer is the same: the workers run the same function).
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import numpy as np

from pipeline.config import AnalysisSettings
from pipeline.results.analysis import changepoints

log = logging.getLogger(__name__)

MIN_PARALLEL = 200
"""Smaller batches are analysed in the calling process: a worker's round trip costs more than they do."""


@dataclass(frozen=True)
class Job:
    """One series' analysis: its history's values and its minimum magnitude."""

    series_id: int
    values: np.ndarray
    min_magnitude: float


def _analyse_all(jobs: Sequence[Job], settings: AnalysisSettings) -> list[changepoints.Analysis]:
    return [changepoints.analyse(job.values, window=settings.window, max_pvalue=settings.max_pvalue,
                                 min_magnitude=job.min_magnitude, min_size=settings.min_size,
                                 confirm_size=settings.confirm_size, confirm_pvalue=settings.confirm_pvalue)
            for job in jobs]


def default_processes() -> int:
    """The machine's cores, at most 8 (beyond that an upload's analysis is not the bottleneck)."""
    return max(1, min(8, os.cpu_count() or 1))


class Workers:
    """`processes` single-process pools, one per shard of series ids (module doc)."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._pools: list[ProcessPoolExecutor] = []
        self._lock = threading.Lock()

    def _started(self) -> list[ProcessPoolExecutor]:
        with self._lock:
            if not self._pools:
                context = multiprocessing.get_context("spawn")
                self._pools = [ProcessPoolExecutor(1, mp_context=context) for _ in range(self.processes)]
            return self._pools

    def shutdown(self) -> None:
        with self._lock:
            pools, self._pools = self._pools, []
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)

    def analyse(self, jobs: Sequence[Job], settings: AnalysisSettings) -> dict[int, changepoints.Analysis]:
        """series id -> its analysis, every job's."""
        if self.processes < 2 or len(jobs) < MIN_PARALLEL:
            return dict(zip((j.series_id for j in jobs), _analyse_all(jobs, settings)))
        shards: list[list[Job]] = [[] for _ in range(self.processes)]
        for job in jobs:
            shards[job.series_id % self.processes].append(job)
        try:
            futures: list[Future[list[changepoints.Analysis]]] = [
                pool.submit(_analyse_all, shard, settings) for pool, shard in zip(self._started(), shards) if shard]
            answers = [a for future in futures for a in future.result()]
        except BrokenProcessPool:
            log.warning("an analysis worker died; this batch is analysed in this process, and the workers restarted")
            self.shutdown()
            return dict(zip((j.series_id for j in jobs), _analyse_all(jobs, settings)))
        return dict(zip((j.series_id for shard in shards for j in shard), answers))


_SHARED: dict[int, Workers] = {}
_SHARED_LOCK = threading.Lock()


def shared(processes: int) -> Workers:
    """The process' workers for this count (started on first use, stopped at exit)."""
    with _SHARED_LOCK:
        if processes not in _SHARED:
            _SHARED[processes] = Workers(processes)
            atexit.register(_SHARED[processes].shutdown)
        return _SHARED[processes]
