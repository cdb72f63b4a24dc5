"""A demo store (tests/service/web/demo_store.py) on SQLite and PostgreSQL behind a live service."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine

from pipeline.config import Settings
from pipeline.service import auth
from pipeline.service.app import create_app
from pipeline.results.store.db import session_scope
from tests.helpers.live_server import live_server
from tests.helpers.stores import blank_engine, database_url, engine, store_url  # noqa: F401  (fixtures)
from tests.helpers.stores import built_engine

from . import demo_store

BOOTSTRAP = "bootstrap-admin-token"


def roofline_data(page: str) -> dict:
    """The roofline chart's data as the page hands it to uPlot (`chart.roofline_chart`)."""
    return json.loads(page.split('<script type="application/json" id="roofline-data">')[1].split("</script>")[0])


@dataclass
class Service:
    url: str
    engine: Engine
    demo: demo_store.Demo
    tokens: dict[str, str]


@pytest.fixture(params=["sqlite", "postgresql"])
def demo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[Engine, demo_store.Demo]]:
    """A copy of the demo store of 24 commits (built once per test process and store: ~1 s each)."""
    with built_engine(request.param, tmp_path_factory.mktemp("store"), "demo-24",
                      lambda built: demo_store.build(built, commits=24)) as built_demo:
        yield built_demo


def _serve(demo: tuple[Engine, demo_store.Demo], home: Path, **web: object) -> Iterator[Service]:
    engine, built = demo  # noqa: F811 (a local, not the fixture)
    with session_scope(engine) as s:
        tokens = {scope: auth.create_token(s, name=f"{scope}-token", scopes=[scope]) for scope in auth.SCOPES}
    settings = Settings(home=home, api_token=BOOTSTRAP, web={"secret_key": "test-secret", **web})
    with live_server(create_app(settings, engine)) as url:
        yield Service(url, engine, built, tokens)


@pytest.fixture
def service(demo: tuple[Engine, demo_store.Demo], tmp_path: Path) -> Iterator[Service]:
    yield from _serve(demo, tmp_path)


@pytest.fixture
def private_service(demo: tuple[Engine, demo_store.Demo], tmp_path: Path) -> Iterator[Service]:
    yield from _serve(demo, tmp_path, public=False)


@pytest.fixture
def paged_service(demo: tuple[Engine, demo_store.Demo], tmp_path: Path) -> Iterator[Service]:
    """Page sizes small enough that the demo store's pages are cut: 3 tiles per dashboard group, 4
    rows per verdict or roofline table."""
    yield from _serve(demo, tmp_path, dashboard_tiles=3, group_tiles=5, page_rows=4)
