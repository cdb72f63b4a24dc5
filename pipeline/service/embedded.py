"""The service process: the API with its background loops (`runtime`, run in the app's lifespan); and
the embedded one-machine mode (`benchfarm up`), which adds an in-process agent talking HTTP to its own
service on loopback and (unless told not to) queues a run of the suite's `ref` on this machine's devices."""

from __future__ import annotations

import fcntl
import io
import logging
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import uvicorn
from pydantic import SecretStr

from pipeline.agents.agent import DeviceAgent
from pipeline.config import Settings
from pipeline.orchestration.dispatch import triggers
from pipeline.service import auth, runtime
from pipeline.service.app import create_app, freeze_startup_heap
from pipeline.results.store import accounts, queue, runs
from pipeline.results.store.db import Engine, open_store, session_scope, shown_url

log = logging.getLogger(__name__)

EMBEDDED_AGENT = "embedded"
_EMBEDDED_TOKEN_PREFIX = "embedded-agent-"
STOPPED_REASON = "cancelled: benchfarm up stopped while the job ran"


class PortTakenError(RuntimeError):
    pass


def check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise PortTakenError(
                f"cannot listen on {host}:{port} ({exc.strerror}): choose another port with --port (or "
                "BENCHFARM_PORT), or another address with --host (or BENCHFARM_HOST)"
            ) from None


UP_LOCK = "up.lock"
"""In BENCHFARM_HOME: the pid of the `benchfarm up` serving from it."""


class HomeTakenError(RuntimeError):
    """Another `benchfarm up` serves from the same BENCHFARM_HOME; the message names its pid."""


@contextmanager
def hold_home(home: Path) -> Iterator[None]:
    """Hold `<home>/up.lock` while a `benchfarm up` runs: two on one folder would share one store, one
    agent spool and one check cache unawares. The lock is an flock, which goes with the process
    however it ends, so a file left by a process that died (its pid still in it) is taken over; the
    pid in it is only there to name the holder."""
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(home / UP_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise HomeTakenError(f"another benchfarm up (pid {holder}) serves from {home}: stop it first, or give "
                                 "this one a folder of its own with BENCHFARM_HOME") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)   # released: no pid left to name
    finally:
        os.close(fd)   # drops the flock


def _loopback_url(settings: Settings) -> str:
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "", "localhost") else settings.host
    return f"http://{host}:{settings.port}"


def _internal_token(engine: Engine) -> tuple[str, str]:
    """An agent-scope token for the in-process agent, deleted again when the service stops
    (stale ones from a process that died are removed first). The in-process agent of an earlier
    process is stored under the same name with its deleted token: it is handed to the new token
    (else the new agent is refused with 403) and shown offline until the new agent registers."""
    name = f"{_EMBEDDED_TOKEN_PREFIX}{secrets.token_hex(4)}"
    with session_scope(engine) as session:
        accounts.delete_tokens_named(session, _EMBEDDED_TOKEN_PREFIX)
        token = auth.create_token(session, name=name, scopes=["agent"])
        queue.set_agent_gone(session, name=EMBEDDED_AGENT, token_name=name, reason=STOPPED_REASON)
    return name, token


def start_embedded_agent(settings: Settings, engine: Engine, *, suite: Path, ref: str | None) -> DeviceAgent:
    """In a background thread: once the service answers, start the in-process agent (same code as
    `benchfarm agent`, over HTTP on loopback) and queue a run of `ref` on its device classes (none
    when `ref` is None: the agent waits for runs triggered from the web UI or `benchfarm trigger`).
    Returns the agent (its `stop` event ends it)."""
    from pipeline.agents.agent_log import AgentLog

    token_name, token = _internal_token(engine)
    url = _loopback_url(settings)
    agent_settings = settings.model_copy(update={"agent": settings.agent.model_copy(
        update={"server_url": url, "token": SecretStr(token)})})
    agent = DeviceAgent(agent_settings, name=EMBEDDED_AGENT,
                        log=AgentLog(settings.agent_dir / "agent.log", terminal=False, stream=_LogStream(), plain=True))

    def work() -> None:
        try:
            threading.Thread(target=agent.run, name="embedded-agent", daemon=True).start()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                with session_scope(engine) as session:   # registered by this process (not the last one's row)
                    if queue.agent_online(session, EMBEDDED_AGENT, token_name=token_name):
                        break
                time.sleep(0.2)
            if ref is None:
                return
            classes = sorted({d.device_class.name for d in agent.devices.values()})
            if not classes:
                log.error("embedded agent: no local device to run %s on", ref)
                return
            with session_scope(engine) as session:
                repository, sha = triggers.resolve_commit_for_trigger(session, settings, repository=None, ref=ref,
                                                                      commit=None)
                result = triggers.queue_run(session, repository=repository, commit_sha=sha, device_classes=classes,
                                            cases=None, max_attempts=settings.dispatch.max_attempts,
                                            extra_targets=settings.dispatch.build_targets, kind="local")
            log.info("run %s of %s@%s queued on %s", result.run_id[:8], repository, sha[:10], ", ".join(classes))
            _announce_when_ended(engine, agent, result.run_id, f"{settings.public_url}/runs/{result.run_id}")
        except Exception:
            log.exception("embedded run of %s failed", ref)

    threading.Thread(target=work, name="embedded-trigger", daemon=True).start()
    return agent


def _announce_when_ended(engine: Engine, agent: DeviceAgent, run_id: str, url: str) -> None:
    """Wait for the run to end, then print where its results are (or why it failed)."""
    while not agent.stop.wait(1.0):
        with session_scope(engine) as session:
            status, error = runs.run_outcome(session, run_id) or ("failed", "the run is gone")
        if status == "done":
            log.info("results ready at %s", url)
            return
        if status == "failed":
            log.error("run %s failed: %s; see %s", run_id[:8], error, url)
            return


class _LogStream(io.TextIOBase):
    """The in-process agent's lines (plain: `AgentLog(plain=True)`), into the service's log at INFO."""

    def write(self, text: str) -> int:
        if text.strip():
            logging.getLogger("pipeline.agents.agent").info("%s", text.strip())
        return len(text)

    def isatty(self) -> bool:
        return False


class _Server(uvicorn.Server):
    """uvicorn's server, calling `on_exit` as soon as it is told to stop (Ctrl-C, SIGTERM)."""

    def __init__(self, config: uvicorn.Config, *, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)


INTERRUPTED_EXIT = 130
"""The exit status of a stop that cancelled work (as `benchfarm run` interrupted), 128 + SIGINT."""


def serve_embedded(settings: Settings, *, suite: Path | None, ref: str, run_on_start: bool,
                   access_log: bool = False) -> int:
    """Serve until interrupted; `access_log`: uvicorn's line per request (off: the terminal stays readable).
    Returns the exit status: 0 for a stop with nothing running, INTERRUPTED_EXIT when the stop
    cancelled a job the in-process agent was running."""
    check_port_free(settings.host, settings.port)
    if suite is not None and not settings.dispatch.suite_path:
        settings = settings.model_copy(update={"dispatch": settings.dispatch.model_copy(
            update={"suite_path": str(Path(suite).resolve())})})
    engine = open_store(settings.database_url)
    app = create_app(settings, engine, lifespan=runtime.lifespan)   # the loops run while uvicorn serves it
    agent = start_embedded_agent(settings, engine, suite=suite, ref=ref if run_on_start else None) if suite else None
    log.info("benchfarm serving %s at %s (Ctrl-C stops)", shown_url(settings.database_url), settings.public_url)
    freeze_startup_heap()
    app.state.stopping = threading.Event()

    def stopping() -> None:
        app.state.stopping.set()   # waiting claims answer 204 now, so the graceful shutdown has none to cancel
        if agent is not None:
            agent.stop.set()

    try:
        # graceful shutdown waits for open requests (2 s at most, then cancels them with a traceback each)
        # log_config None: uvicorn's lines go through the command's logging, in its one format
        # lifespan "on": the app has one (the loops); any failure of it is an error that stops the server
        config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level.lower(),
                                timeout_graceful_shutdown=2, access_log=access_log, log_config=None, lifespan="on")
        server = _Server(config, on_exit=stopping)
        try:
            server.run()
        except KeyboardInterrupt:   # uvicorn raises the captured Ctrl-C again once it has stopped: the way out
            pass
        if not server.started and not app.state.stopping.is_set():
            raise RuntimeError("the service did not start: its background loops could not (the log above says why)")
    finally:
        if agent is not None:
            agent.stop.set()
        with session_scope(engine) as session:
            accounts.delete_tokens_named(session, _EMBEDDED_TOKEN_PREFIX)
            cancelled = queue.set_agent_gone(session, name=EMBEDDED_AGENT, reason=STOPPED_REASON) if agent else []
        for job_id in cancelled:
            log.warning("job %s cancelled (it was running when benchfarm up stopped)", job_id)
        status = INTERRUPTED_EXIT if cancelled else 0
        if agent is not None and agent.busy():
            # The job's worker thread is inside native code (IREE, CUDA) that cannot be interrupted;
            # a normal interpreter exit would unwind that thread through C++ frames and abort the
            # process ("FATAL: exception not rethrown"). Its job is recorded as cancelled above.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    return status
