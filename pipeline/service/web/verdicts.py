"""Comparisons as the pages show them: computed once, kept while what they read is unchanged, ordered.

A comparison of a large farm's commit (20,000 cases x device classes) takes a second or two to
compute (its samples read, its tests run); the compare and run pages ask for the same ones
again and again (paging, filters, reloads while a run fills in). Each device class's comparison is
kept on its own (a run page and a compare page share them), and served while the store has not
changed at all (`compare.store_version`, three primary-key maxima) or, when it has, while its
fingerprint has not: the head's newest result on the class, the base the ancestor walk finds and
the base's newest result there. On a farm where results arrive every few seconds for other
commits, a pull request's comparison stays kept; a result of its head or base, or a nearer
ancestor getting results, makes it computed again. `VerdictWarmer` computes the comparison of
each job that ends, so that even the first view of a run's or a pull request's comparison is kept.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.config import Settings
from pipeline.loops import Loop
from pipeline.pr_comments.table import counts_text
from pipeline.results.store.compare import (
    STATUSES,
    CompareError,
    ComparisonOut,
    ComparisonRowOut,
    PRVerdictOut,
    choose_base,
    combine,
    compare,
    overall_verdict,
    result_device_classes,
    results_version,
    store_version,
)
from pipeline.results.store.db import Engine, Session, session_scope, session_url
from pipeline.results.store.queries import RunOut
from pipeline.results.store.runs import ended_jobs, first_done_of_newest_runs, last_finished_jobs, result_classes_of_runs

ROW_ORDERS: dict[str, Callable[[ComparisonRowOut], Any]] = {
    "verdict": lambda r: (STATUSES.index(r.status), str(r.case_id), r.target),
    "slowdown": lambda r: (r.change is None, -(r.change or 0.0), str(r.case_id), r.target),
    "speedup": lambda r: (r.change is None, r.change or 0.0, str(r.case_id), r.target),
    "case": lambda r: (str(r.case_id), r.target),
}
"""The server-side orders of a verdict table (a page's column headers sort the rows it shows); case
ids in their text's order (a CaseId has none: ordering them field by field would differ)."""

log = logging.getLogger("benchfarm.web.verdicts")

CACHE_SIZE = 256
"""Comparisons kept (one device class each; ~0.5 MB for 2,000 rows): room for the dashboard's newest
runs on ten device classes (`NEWEST_RUNS`), their commits' and the pages being read."""
CACHE_TTL_S = 3600.0
"""A kept comparison is recomputed after this long at most: the fingerprint sees new results; the
limit bounds what it cannot see (a row changed or deleted in place)."""


@dataclass
class _Kept:
    made_at: float
    store: tuple[int | None, ...]
    """`compare.store_version` when last found valid"""
    fingerprint: tuple[object, ...] | None
    """None: results it may have read came in while it was computed; valid for that store version only"""
    comparison: ComparisonOut


_kept: OrderedDict[tuple[object, ...], _Kept] = OrderedDict()
_kept_lock = threading.Lock()


def cached_verdict(session: Session, settings: Settings, repository: str, head: str, base: str | None,
                   device_class: str | None, merge_base: str | None) -> PRVerdictOut:
    """`compare_all` (device_class None: every class the head has results on) or `compare` on one
    device class, rows in verdict order, each class's comparison kept while what it read is
    unchanged (module doc). Raises CompareError."""
    classes = [device_class] if device_class else result_device_classes(session, repository=repository,
                                                                         head_sha=head)
    version = store_version(session)
    return combine(repository, head, [_cached(session, settings, repository, head, base, dc, merge_base, version)
                                      for dc in classes])


def _key(session: Session, settings: Settings, repository: str, head: str, base: str | None, device_class: str,
         merge_base: str | None, run_id: str | None = None) -> tuple[object, ...]:
    return (session_url(session), settings.compare.model_dump_json(), repository, head, base,
            device_class, merge_base, run_id)


def kept_comparison(session: Session, settings: Settings, repository: str, head: str, base: str | None,
                    device_class: str, merge_base: str | None) -> ComparisonOut | None:
    """The comparison kept for these inputs, whether or not still valid; None: none is kept."""
    with _kept_lock:
        kept = _kept.get(_key(session, settings, repository, head, base, device_class, merge_base))
    return kept.comparison if kept else None


def cached_comparison(session: Session, settings: Settings, repository: str, head: str, base: str | None,
                      device_class: str, merge_base: str | None, run_id: str | None = None) -> ComparisonOut:
    """`compare` on one device class (of one run's results, when `run_id` is given), rows in verdict
    order, kept (module doc). Raises CompareError."""
    return _cached(session, settings, repository, head, base, device_class, merge_base, store_version(session),
                   run_id)


def _cached(session: Session, settings: Settings, repository: str, head: str, base: str | None, device_class: str,
            merge_base: str | None, version: tuple[int | None, ...], run_id: str | None = None) -> ComparisonOut:
    # a run's comparison is kept under its own key; the fingerprint (the commit's newest result) covers it
    kept = _still_kept(session, settings, repository, head, base, device_class, merge_base, version, run_id)
    if kept is not None:
        return kept
    key = _key(session, settings, repository, head, base, device_class, merge_base, run_id)
    now = time.monotonic()

    head_before = results_version(session, repository=repository, sha=head, device_class=device_class)
    base_before = base or choose_base(session, repository=repository, sha=head, device_class=device_class,
                                      walk=settings.compare.ancestor_walk, merge_base=merge_base).sha
    base_results_before = results_version(session, repository=repository, sha=base_before,
                                          device_class=device_class) if base_before else None
    comparison = compare(session, repository=repository, head_sha=head, device_class=device_class,
                         settings=settings.compare, base_sha=base, merge_base=merge_base, run_id=run_id)
    comparison = comparison.model_copy(update={"rows": sorted(comparison.rows, key=ROW_ORDERS["verdict"])})
    fingerprint: tuple[object, ...] | None = _fingerprint(session, settings, comparison, merge_base)
    # The fingerprint is read after the comparison: it describes what the comparison read only if
    # the head's and the base's results (and the walk's base) did not move meanwhile.
    walked = comparison.base_source not in ("explicit", "paired")
    before = (head_before, *([base_before] if walked else []), base_results_before)
    consistent = comparison.base_sha == base_before and fingerprint == before
    if not consistent and store_version(session) != version:
        fingerprint = None
    with _kept_lock:
        _kept[key] = _Kept(now, version, fingerprint, comparison)
        _kept.move_to_end(key)
        while len(_kept) > CACHE_SIZE:
            _kept.popitem(last=False)
    return comparison


NEWEST_RUNS = 10
"""The runs the dashboard lists, newest first, each with its verdict."""
NEWEST_RUNS_BUDGET_S = 0.5
"""What the dashboard spends computing the verdicts of its newest runs that are not kept yet (a large
farm's run takes a second or more; the warmer keeps them for the next view): past it, a run's verdict
is left to its page. The newest run with results is computed whatever it takes."""


@dataclass(frozen=True)
class RunVerdict:
    verdict: str
    """`overall_verdict` over the run's rows on every device class it stored results on"""
    counts: str
    """`counts_text`: "1 regressed, 5 similar" """


def run_verdicts(session: Session, settings: Settings, runs: Sequence[RunOut],
                 budget_s: float = NEWEST_RUNS_BUDGET_S) -> dict[str, RunVerdict | None]:
    """run id -> the verdict of the run's own results against their base (what its page and `benchfarm
    run` show: `cached_comparison` of the run on each device class), for the runs that stored results;
    None for one not computed within `budget_s` (`NEWEST_RUNS_BUDGET_S`)."""
    classes = result_classes_of_runs(session, [r.id for r in runs])
    verdicts: dict[str, RunVerdict | None] = {}
    version = store_version(session)
    started = time.monotonic()
    for run in runs:
        if run.id not in classes:
            continue
        # past the budget, only kept comparisons (the first run with results is computed whatever it takes)
        compute = _cached if not verdicts or time.monotonic() - started <= budget_s else _still_kept
        try:
            comparisons = [compute(session, settings, run.repository, run.commit_sha, None, dc, None, version, run.id)
                           for dc in classes[run.id]]
        except CompareError:
            continue
        if any(c is None for c in comparisons):
            verdicts[run.id] = None
        elif rows := [row for c in comparisons if c is not None for row in c.rows]:
            verdicts[run.id] = RunVerdict(overall_verdict(rows), counts_text(rows))
    return verdicts


def _still_kept(session: Session, settings: Settings, repository: str, head: str, base: str | None,
                device_class: str, merge_base: str | None, version: tuple[int | None, ...],
                run_id: str | None = None) -> ComparisonOut | None:
    """The kept comparison for these inputs while it is valid (module doc); None: compute it."""
    key = _key(session, settings, repository, head, base, device_class, merge_base, run_id)
    with _kept_lock:
        kept = _kept.get(key)
    if kept is not None and time.monotonic() - kept.made_at < CACHE_TTL_S and (
            kept.store == version or kept.fingerprint is not None
            and kept.fingerprint == _fingerprint(session, settings, kept.comparison, merge_base)):
        kept.store = version
        with _kept_lock:
            if key in _kept:
                _kept.move_to_end(key)
        return kept.comparison
    return None


def _fingerprint(session: Session, settings: Settings, comparison: ComparisonOut,
                 merge_base: str | None) -> tuple[object, ...]:
    """What the comparison read, as values that change when it would come out different: the head's
    newest result on the class, the base the ancestor walk finds (an explicit or paired base cannot
    move while the head's results stay the same) and the base's newest result there."""
    repository, dc = comparison.repository, comparison.device_class
    parts: list[object] = [results_version(session, repository=repository, sha=comparison.head_sha, device_class=dc)]
    if comparison.base_source not in ("explicit", "paired"):
        parts.append(choose_base(session, repository=repository, sha=comparison.head_sha, device_class=dc,
                                 walk=settings.compare.ancestor_walk, merge_base=merge_base).sha)
    parts.append(results_version(session, repository=repository, sha=comparison.base_sha, device_class=dc)
                 if comparison.base_sha else None)
    return tuple(parts)


class VerdictWarmer(Loop):
    """Computes the kept comparisons of each job that ends (its commit's, and its run's own results', on
    its device class against the base the pages find), so the first view of a run or a pull request
    is served kept; on start, those of the dashboard's newest runs (`NEWEST_RUNS`)."""

    def __init__(self, settings: Settings, engine: Engine, period_s: float = 2.0) -> None:
        super().__init__("verdict-warmer", period_s)
        self.settings, self.engine = settings, engine
        # jobs that ended before the service started: only those of the dashboard's newest runs are warmed
        with session_scope(engine) as session:
            self._since = first_done_of_newest_runs(session, NEWEST_RUNS)
            self._warmed: set[str] = set()
            if self._since is None:   # none of them has results: from now on
                self._since, self._warmed = last_finished_jobs(session)

    def step(self) -> bool:
        with session_scope(self.engine) as session:
            ended = [e for e in ended_jobs(session, self._since, limit=50) if e.id not in self._warmed]
        for e in ended:
            try:
                with session_scope(self.engine) as session:   # the commit's (compare page) and the run's (run page)
                    cached_comparison(session, self.settings, e.repository, e.sha, None, e.device_class, None)
                    cached_comparison(session, self.settings, e.repository, e.sha, None, e.device_class, None,
                                      e.run_id)
            except CompareError as exc:
                log.info("job %s: no comparison to keep (%s)", e.id, exc)
            if e.finished_at is not None and (self._since is None or e.finished_at > self._since):
                self._warmed = set()
                self._since = e.finished_at
            self._warmed.add(e.id)
        return bool(ended)
