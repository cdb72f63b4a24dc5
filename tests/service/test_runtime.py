"""The service's background runtime: the app's lifespan starts every loop once and stops them all
when the server shuts down (a real uvicorn on loopback, both stores); shutdown waits for a loop
busy in a step no longer than its timeout."""

from __future__ import annotations

import threading
from pathlib import Path

import requests
from sqlalchemy import Engine

from pipeline.config import DispatchSettings, Settings
from pipeline.loops import Loop
from pipeline.service import runtime
from pipeline.service.app import create_app
from tests.helpers.live_server import live_server
from tests.helpers.stores import database_url, engine, store_url  # noqa: F401  (fixtures)

EVERY_LOOP = {"dispatch-reaper", "webhook-worker", "reporter", "verdict-warmer", "alerter", "nightly", "bisector",
              "dispatch-builder"}


def _loop_threads() -> list[Loop]:
    return [thread for thread in threading.enumerate() if isinstance(thread, Loop)]


def test_the_lifespan_starts_every_loop_once_and_stops_them_on_shutdown(engine: Engine,  # noqa: F811
                                                                          tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, dispatch=DispatchSettings(suite_path=str(tmp_path / "suite")))
    before = set(_loop_threads())
    app = create_app(settings, engine, lifespan=runtime.lifespan)
    assert set(_loop_threads()) == before, "making the app starts nothing"
    with live_server(app) as url:
        assert requests.get(f"{url}/api/v1/health", timeout=10).status_code == 200
        loops = app.state.loops
        assert {loop.name for loop in loops} == EVERY_LOOP and len(loops) == len(EVERY_LOOP)
        assert all(loop.is_alive() for loop in loops)
        assert set(_loop_threads()) - before == set(loops), "each loop runs once, in its own thread"
    assert not [loop.name for loop in loops if loop.is_alive()], "shutdown stopped and joined every loop"


def test_without_a_suite_checkout_or_with_outside_builders_the_service_builds_nothing(engine: Engine,  # noqa: F811
                                                                                       tmp_path: Path) -> None:
    outside = DispatchSettings(suite_path=str(tmp_path / "suite"), builder=False)
    for settings in (Settings(home=tmp_path), Settings(home=tmp_path, dispatch=outside)):
        names = {loop.name for loop in runtime.service_loops(settings, engine)}
        assert names == EVERY_LOOP - {"dispatch-builder"}


class _Stuck(Loop):
    """A loop whose one step lasts until `release` is set (a build, a git fetch)."""

    def __init__(self) -> None:
        super().__init__("stuck", period_s=0.01)
        self.entered, self.release = threading.Event(), threading.Event()

    def step(self) -> bool:
        self.entered.set()
        self.release.wait()
        return False


def test_shutdown_joins_idle_loops_and_waits_for_a_busy_one_no_longer_than_its_timeout() -> None:
    stuck, idle, never_started = _Stuck(), _Stuck(), _Stuck()
    idle.release.set()
    for loop in (stuck, idle):
        loop.start()
    assert stuck.entered.wait(10) and idle.entered.wait(10)
    assert runtime.stop_loops([idle, never_started], timeout_s=10) == []
    assert not idle.is_alive()
    assert runtime.stop_loops([stuck], timeout_s=0.0) == ["stuck"], "named, not waited for"
    stuck.release.set()   # its step ends: the loop sees it was told to stop
    stuck.join(10)
    assert not stuck.is_alive()
