"""The test session's order: the slow tier first (the `e2e` and `slow` markers), its longest files
first of all, so that with several test processes (`infra/local.sh test`, pytest-xdist by file) the
longest files start early and the run does not end with one process alone on one of them. Within
each group, the order pytest collected."""

from __future__ import annotations

import pytest

LONGEST = ("tests/test_packaging.py", "tests/service/test_api_schemathesis.py",
           "tests/results/store/test_incremental_analysis.py", "tests/e2e/test_faults.py",
           "tests/results/store/test_analysis.py", "tests/e2e/test_history.py", "tests/e2e/test_interrupt.py",
           "tests/service/web/test_pages.py", "tests/test_bench.py", "tests/e2e/test_bisect.py",
           "tests/service/web/test_browser_e2e.py")
"""Files of two minutes or more in one test process of four (2026-11-28, this 2-core VM), longest first.
pytest-xdist sends them in this order only with `--no-loadscope-reorder` (infra/local.sh passes it);
by default it sends the files with the most tests first."""


def _rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    if path in LONGEST:
        return LONGEST.index(path)
    if item.get_closest_marker("e2e") or item.get_closest_marker("slow"):
        return len(LONGEST)
    return len(LONGEST) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # pytest-xdist schedules by test id: tests sharing one id run once for all of them, silently
    seen: set[str] = set()
    twice = sorted({item.nodeid for item in items if item.nodeid in seen or seen.add(item.nodeid)})
    if twice:
        raise pytest.UsageError(f"{len(twice)} test ids are collected more than once (each must be unique): {twice[:5]}")
    items.sort(key=_rank)
