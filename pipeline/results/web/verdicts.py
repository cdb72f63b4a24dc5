"""Comparisons as the pages show them: computed once per store version, kept, and ordered.

A comparison of a large farm's commit (20,000 cases x device classes) takes a second or two to
compute (its samples read, its rank tests run); the compare and run pages ask for the same one
again and again (paging, filters, reloads while a run fills in). It is kept per (inputs, compare
settings, store version), so nothing stale is shown: new results or commits change the version.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from pipeline.config import Settings
from pipeline.pr_comments.table import STATUS_ORDER
from pipeline.results.compare import ComparisonRow, PRVerdict, compare, compare_all, overall_verdict
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
"""Verdicts are kept per (inputs, store version) for this long at most: `data.store_version` sees
new uploads and commits; the limit bounds what it cannot see (a row changed in place)."""
_verdicts: OrderedDict[tuple[object, ...], tuple[float, PRVerdict]] = OrderedDict()
_verdicts_lock = threading.Lock()


def cached_verdict(session: Session, settings: Settings, repository: str, head: str, base: str | None,
                   device_class: str | None, merge_base: str | None) -> PRVerdict:
    """`compare_all` (device_class None) or `compare` on one device class, rows in verdict order,
    from the cache when the store has not changed since it was computed. Raises CompareError."""
    key = (str(session.get_bind().engine.url), settings.compare.model_dump_json(), repository, head, base, device_class,
           merge_base, store_version(session))
    now = time.monotonic()
    with _verdicts_lock:
        hit = _verdicts.get(key)
        if hit is not None and now - hit[0] < CACHE_TTL_S:
            _verdicts.move_to_end(key)
            return hit[1]
    verdict = _compute(session, settings, repository, head, base, device_class, merge_base)
    for comparison in verdict.comparisons:
        comparison.rows.sort(key=ROW_ORDERS["verdict"])
    with _verdicts_lock:
        _verdicts[key] = (now, verdict)
        while len(_verdicts) > CACHE_SIZE:
            _verdicts.popitem(last=False)
    return verdict


def _compute(session: Session, settings: Settings, repository: str, head: str, base: str | None,
             device_class: str | None, merge_base: str | None) -> PRVerdict:
    if device_class is None:
        return compare_all(session, repository=repository, head_sha=head, settings=settings.compare,
                           base_sha=base, merge_base=merge_base)
    one = compare(session, repository=repository, head_sha=head, device_class=device_class,
                  settings=settings.compare, base_sha=base, merge_base=merge_base)
    return PRVerdict(repository=repository, head_sha=head, comparisons=[one], verdict=overall_verdict(one.rows),
                     errored=one.errored, counts=one.counts)
