"""Comparisons as the pages show them: computed once, kept while what they read is unchanged, ordered.

A comparison of a large farm's commit (20,000 cases x device classes) takes a second or two to
compute (its samples read, its rank tests run); the compare and run pages ask for the same one
again and again (paging, filters, reloads while a run fills in). A kept comparison is served while
the store has not changed at all (`data.store_version`, three primary-key maxima), and, when it
has, while its fingerprint has not: the newest result of the head commit, each device class's base
choice and the newest result of each base. On a farm where results arrive every few seconds for
other commits, a pull request's comparison stays kept; a result of its head or base, or a nearer
ancestor getting results, makes it computed again.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from pipeline.config import Settings
from pipeline.pr_comments.table import STATUS_ORDER
from pipeline.results.compare import (
    ComparisonRow,
    PRVerdict,
    choose_base,
    compare,
    compare_all,
    overall_verdict,
    results_version,
)
from pipeline.results.web.data import store_version

ROW_ORDERS: dict[str, Callable[[ComparisonRow], Any]] = {
    "verdict": lambda r: (STATUS_ORDER.index(r.status), r.case_id, r.target),
    "slowdown": lambda r: (r.change is None, -(r.change or 0.0), r.case_id, r.target),
    "speedup": lambda r: (r.change is None, r.change or 0.0, r.case_id, r.target),
    "case": lambda r: (r.case_id, r.target),
}
"""The server-side orders of a verdict table (a page's column headers sort the rows it shows)."""

CACHE_SIZE = 64
CACHE_TTL_S = 300.0
"""A kept comparison is recomputed after this long at most: the fingerprint sees new results; the
limit bounds what it cannot see (a row changed or deleted in place)."""


@dataclass
class _Kept:
    made_at: float
    store: tuple[int | None, ...]
    """`data.store_version` when last found valid"""
    fingerprint: tuple[object, ...] | None
    """None: the store changed while it was computed, so it is valid for that store version only"""
    verdict: PRVerdict


_kept: OrderedDict[tuple[object, ...], _Kept] = OrderedDict()
_kept_lock = threading.Lock()


def cached_verdict(session: Session, settings: Settings, repository: str, head: str, base: str | None,
                   device_class: str | None, merge_base: str | None) -> PRVerdict:
    """`compare_all` (device_class None) or `compare` on one device class, rows in verdict order,
    kept while what it read is unchanged (module doc). Raises CompareError."""
    key = (str(session.get_bind().engine.url), settings.compare.model_dump_json(), repository, head, base, device_class,
           merge_base)
    now = time.monotonic()
    version = store_version(session)
    with _kept_lock:
        kept = _kept.get(key)
    if kept is not None and now - kept.made_at < CACHE_TTL_S:
        if kept.store == version:
            return _touch(key, kept)
        if kept.fingerprint is not None and kept.fingerprint == _fingerprint(session, settings, kept.verdict,
                                                                            merge_base):
            kept.store = version
            return _touch(key, kept)
    verdict = _compute(session, settings, repository, head, base, device_class, merge_base)
    for comparison in verdict.comparisons:
        comparison.rows.sort(key=ROW_ORDERS["verdict"])
    fingerprint = _fingerprint(session, settings, verdict, merge_base)
    unchanged = store_version(session) == version  # else results came in meanwhile: trust the version only
    with _kept_lock:
        _kept[key] = _Kept(now, version, fingerprint if unchanged else None, verdict)
        _kept.move_to_end(key)
        while len(_kept) > CACHE_SIZE:
            _kept.popitem(last=False)
    return verdict


def _touch(key: tuple[object, ...], kept: _Kept) -> PRVerdict:
    with _kept_lock:
        if key in _kept:
            _kept.move_to_end(key)
    return kept.verdict


def _fingerprint(session: Session, settings: Settings, verdict: PRVerdict,
                 merge_base: str | None) -> tuple[object, ...]:
    """What the comparison read, as values that change when it would come out different: the head's
    newest result (any device class: a new class is a new table), and per device class the base
    found by walking the ancestors (an explicit or paired base cannot move while the head's results
    stay the same) and the base's newest result there."""
    parts: list[object] = [results_version(session, repository=verdict.repository, sha=verdict.head_sha)]
    for c in verdict.comparisons:
        if c.base_source not in ("explicit", "paired"):
            parts.append(choose_base(session, repository=verdict.repository, sha=verdict.head_sha,
                                     device_class=c.device_class, walk=settings.compare.ancestor_walk,
                                     merge_base=merge_base).sha)
        parts.append(results_version(session, repository=verdict.repository, sha=c.base_sha,
                                     device_class=c.device_class) if c.base_sha else None)
    return tuple(parts)


def _compute(session: Session, settings: Settings, repository: str, head: str, base: str | None,
             device_class: str | None, merge_base: str | None) -> PRVerdict:
    if device_class is None:
        return compare_all(session, repository=repository, head_sha=head, settings=settings.compare,
                           base_sha=base, merge_base=merge_base)
    one = compare(session, repository=repository, head_sha=head, device_class=device_class,
                  settings=settings.compare, base_sha=base, merge_base=merge_base)
    return PRVerdict(repository=repository, head_sha=head, comparisons=[one], verdict=overall_verdict(one.rows),
                     errored=one.errored, counts=one.counts)
