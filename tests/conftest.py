"""The test session's order: the slow tier first (the `e2e` and `slow` markers), its longest files
first of all, so that with several test processes (`infra/local.sh test`, pytest-xdist by file) the
longest files start early and the run does not end with one process alone on one of them. Within
each group, the order pytest collected."""

from __future__ import annotations

import pytest

LONGEST = ("tests/e2e/test_bisect.py", "tests/test_packaging.py", "tests/e2e/test_faults.py", "tests/e2e/test_history.py")
"""Files of a minute or more (CI's --durations), longest first."""


def _rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    if path in LONGEST:
        return LONGEST.index(path)
    if item.get_closest_marker("e2e") or item.get_closest_marker("slow"):
        return len(LONGEST)
    return len(LONGEST) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)
