from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.github_standin import GitHubStandIn, github_standin


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith("BENCHFARM_") and key != "BENCHFARM_UPDATE_GOLDEN":   # the golden files' own switch
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def standin() -> Iterator[GitHubStandIn]:
    with github_standin() as served:
        yield served
