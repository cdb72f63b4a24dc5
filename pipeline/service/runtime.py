"""The service's background runtime: its loops, started in the app's lifespan and stopped when it ends.

`lifespan` is handed to `create_app` where the service runs for real (`benchfarm serve` and
`benchfarm up`: `embedded.serve_embedded`); an app made without it (the tests' apps) runs no loop.
On start, before any loop: running jobs get a fresh lease (their agents could not heartbeat while
the service was down) and local jobs whose `benchfarm run` is gone are failed. On shutdown every
loop is told to stop, then joined within `STOP_TIMEOUT_S` in all: an idle loop ends at once; one
inside a long step (a build, a git fetch) is named in the log and left to the process's exit (its
thread is a daemon; the reaper of the next service queues its build again).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from pipeline.config import Settings
from pipeline.orchestration.dispatch.bisect import Bisector
from pipeline.orchestration.dispatch.triggers import Builder, Nightly, Reaper
from pipeline.loops import Loop
from pipeline.pr_comments.reporter import Reporter
from pipeline.service.alerts import Alerter
from pipeline.service.github_webhook import WebhookWorker
from pipeline.service.web.verdicts import VerdictWarmer
from pipeline.results.store import queue
from pipeline.results.store.db import Engine, session_scope

__all__ = ["STOP_TIMEOUT_S", "lifespan", "recover_after_restart", "service_loops", "stop_loops"]

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 5.0
"""How long shutdown waits for the loops, all together, once told to stop."""


def service_loops(settings: Settings, engine: Engine) -> list[Loop]:
    """Every loop of the service, not started: the reaper, the webhook worker, the reporter, the
    verdict warmer, the alerter, the nightly, the bisector, and the builder when the service has a
    suite checkout and `dispatch.builder` (else `benchfarm builder` processes build)."""
    loops: list[Loop] = [Reaper(settings, engine), WebhookWorker(settings, engine), Reporter(settings, engine),
                         VerdictWarmer(settings, engine), Alerter(settings, engine), Nightly(settings, engine),
                         Bisector(settings, engine)]
    if settings.dispatch.suite_path and settings.dispatch.builder:
        loops.append(Builder(settings, engine, suite=Path(settings.dispatch.suite_path)))
    return loops


def recover_after_restart(settings: Settings, engine: Engine) -> None:
    """Before the loops: running jobs get a fresh lease, and local jobs whose `benchfarm run` is gone
    are failed (`queue.reap_orphaned_local_jobs`)."""
    with session_scope(engine) as session:
        extended = queue.extend_leases(session, lease_s=settings.dispatch.lease_s)
        reaped = queue.reap_orphaned_local_jobs(session)
    if reaped:
        log.warning("failed %d job(s) left unfinished by benchfarm processes that are gone", len(reaped))
    if extended:
        log.info("%d running jobs get a fresh lease after the restart", extended)


def stop_loops(loops: Sequence[Loop], timeout_s: float = STOP_TIMEOUT_S) -> list[str]:
    """Tell every loop to stop, then join them within `timeout_s` in all; the names of those still running."""
    for loop in loops:
        loop.stop()
    deadline = time.monotonic() + timeout_s
    for loop in loops:
        if loop.ident is not None:   # started
            loop.join(max(0.0, deadline - time.monotonic()))
    running = [loop.name for loop in loops if loop.is_alive()]
    if running:
        log.warning("still in a step after %.0f s, left to the process's exit: %s", timeout_s, ", ".join(running))
    return running


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The app's lifespan: the loops (`service_loops`, kept in `app.state.loops`) run while it is open."""
    settings: Settings = app.state.settings
    engine: Engine = app.state.engine
    recover_after_restart(settings, engine)
    loops = service_loops(settings, engine)
    app.state.loops = loops
    try:
        for loop in loops:
            loop.start()
        yield
    finally:
        stop_loops(loops)
