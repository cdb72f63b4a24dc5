"""Serve an ASGI app with a real uvicorn server on a free loopback port, in a thread."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Server(uvicorn.Server):
    """uvicorn's server, setting `ready` once its startup is over (listening, or failed)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        finally:
            self.ready.set()


@contextmanager
def live_server(app: FastAPI) -> Iterator[str]:
    """Yields the base URL (http://127.0.0.1:PORT) while the server runs. The socket is bound here
    and handed to uvicorn: no other process can take the port between choosing it and listening."""
    # IPPROTO_TCP named: asyncio turns Nagle off (TCP_NODELAY) only on sockets whose proto says TCP, and an
    # accepted socket takes the listener's. With proto 0 each response on a kept-alive connection (headers
    # and body written apart) waited ~40 ms for the client's delayed ACK, where `benchfarm serve` answers in 1-2.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.bind(("127.0.0.1", 0))
    port = int(listener.getsockname()[1])
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))

    def serve() -> None:
        try:
            server.run(sockets=[listener])
        finally:
            server.ready.set()   # a server that ended before its startup did: not waited for

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        # the deadline only ends a hung startup (the app's lifespan): a loaded machine is waited for
        if not server.ready.wait(timeout=120) or not server.started:
            raise RuntimeError("test server did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()
