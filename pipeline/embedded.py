"""The embedded one-machine mode: the service, the store and an in-process agent in one process."""

from __future__ import annotations

import logging
import socket
import threading
from pathlib import Path

import uvicorn
from sqlalchemy.engine import Engine

from pipeline.config import Settings
from pipeline.results.api import create_app
from pipeline.results.db import open_store

log = logging.getLogger(__name__)


class PortTakenError(RuntimeError):
    pass


def check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise PortTakenError(
                f"cannot listen on {host}:{port} ({exc.strerror}); set BENCHFARM_PORT or BENCHFARM_HOST"
            ) from None


def start_embedded_agent(settings: Settings, engine: Engine, *, suite: Path, ref: str) -> threading.Thread:
    """Benchmark `ref` of the suite on this machine's devices in a background thread."""
    from pipeline.local_pipeline import run_pipeline

    def work() -> None:
        try:
            outcome = run_pipeline(settings=settings, engine=engine, suite=suite, ref=ref)
        except Exception:
            log.exception("embedded run of %s failed", ref)
            return
        for comparison in outcome.comparisons:
            log.info("run %s on %s: %s", outcome.run_id, comparison.device_class, comparison.counts)
        log.info("run %s done: results at %s/runs/%s", outcome.run_id, settings.public_url, outcome.run_id)

    thread = threading.Thread(target=work, name="embedded-agent", daemon=True)
    thread.start()
    return thread


def serve_embedded(settings: Settings, *, suite: Path | None, ref: str, run_on_start: bool) -> None:
    check_port_free(settings.host, settings.port)
    engine = open_store(settings.database_url)
    app = create_app(settings, engine)
    if run_on_start and suite is not None:
        start_embedded_agent(settings, engine, suite=suite, ref=ref)
    print(f"benchfarm serving {settings.database_url} at {settings.public_url}  (Ctrl-C stops)", flush=True)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level.lower())
