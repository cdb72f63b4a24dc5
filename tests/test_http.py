"""The one retry policy (`pipeline.http`) over real HTTP on loopback: a scripted service counts the
requests it gets, so each test sees exactly how many times a request was sent. Waits go to an
injected sleep (recorded, never slept)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from pipeline import http
from pipeline.agents.client import ServiceClient, ServiceError, Unreachable

LOST = 0
"""A scripted answer that closes the connection after reading the request (the answer is lost)."""


class ScriptedService:
    """Answers each request with the next (status, headers) of `script` (then 200), recording the
    method, path and headers of every request it read."""

    def __init__(self) -> None:
        self.script: list[tuple[int, dict[str, str]]] = []
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.seen.append((self.command, self.path, dict(self.headers.items())))
                status, headers = outer.script.pop(0) if outer.script else (200, {})
                if status == LOST:
                    self.close_connection = True
                    return
                body = b'{"error": "scripted"}' if status >= 400 else b'{"ok": true}'
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # a short poll: shutdown() waits for it at each test's end
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def answer(self, *statuses: int | tuple[int, dict[str, str]]) -> None:
        self.script = [s if isinstance(s, tuple) else (s, {}) for s in statuses]
        self.seen.clear()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service() -> Iterator[ScriptedService]:
    scripted = ScriptedService()
    yield scripted
    scripted.close()


def _client(url: str, waits: list[float], retries: int = 3) -> ServiceClient:
    return ServiceClient(url, "t", retries=retries, backoff_s=0.5, backoff_max_s=4.0, sleep=waits.append)


def test_a_post_without_key_is_not_sent_again_after_a_502(service: ScriptedService) -> None:
    waits: list[float] = []
    service.answer(502)
    with pytest.raises(ServiceError) as raised:
        _client(service.url, waits).post("jobs/claim", {"agent": "a"})
    assert raised.value.status == 502 and len(service.seen) == 1 and waits == []


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_post_with_a_key_is_sent_again_with_the_same_key(service: ScriptedService, status: int) -> None:
    waits: list[float] = []
    service.answer(status, status)
    assert _client(service.url, waits).post("results", {"job_id": "j"}, idempotent=True) == {"ok": True}
    keys = [headers.get(http.IDEMPOTENCY_KEY) for _, _, headers in service.seen]
    assert len(keys) == 3 and keys[0] and len(set(keys)) == 1
    assert waits == [0.5, 1.0]


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_idempotent_methods_are_sent_again_with_back_off(service: ScriptedService, method: str) -> None:
    waits: list[float] = []
    service.answer(502, 503, 504, 502)
    response = _client(service.url, waits, retries=5).request(method, "jobs", json={} if method == "PUT" else None)
    assert response.status_code == 200 and [m for m, _, _ in service.seen] == [method] * 5
    assert waits == [0.5, 1.0, 2.0, 4.0]   # doubled, at most backoff_max_s


def test_retry_after_is_waited_instead_of_the_back_off(service: ScriptedService) -> None:
    waits: list[float] = []
    service.answer((503, {"Retry-After": "3"}), (503, {"Retry-After": "60"}), (503, {}))
    assert _client(service.url, waits).get("health") == {"ok": True}
    assert waits == [3.0, 4.0, 2.0]   # as asked; capped at backoff_max_s; no Retry-After: the back-off


def test_the_last_answer_after_the_retries_is_reported(service: ScriptedService) -> None:
    waits: list[float] = []
    service.answer(502, 502, 502, 502)
    with pytest.raises(ServiceError) as raised:
        _client(service.url, waits).get("jobs")
    assert raised.value.status == 502 and len(service.seen) == 4
    service.answer(503, 503, 503, 503)   # the service is up, its store is not: wait as for no answer
    with pytest.raises(Unreachable, match="unavailable after 4 attempts"):
        _client(service.url, waits).get("jobs")
    service.answer(503)
    with pytest.raises(Unreachable, match="unavailable after 1 attempt;"):
        _client(service.url, waits).post("jobs/claim", {})
    assert len(service.seen) == 1


def test_other_errors_are_answers_not_retries(service: ScriptedService) -> None:
    waits: list[float] = []
    for status in (500, 404, 409, 429):
        service.answer(status)
        with pytest.raises(ServiceError) as raised:
            _client(service.url, waits).get("jobs")
        assert raised.value.status == status and len(service.seen) == 1
    assert waits == []


def test_a_lost_answer_is_sent_again_only_when_resendable(service: ScriptedService) -> None:
    waits: list[float] = []
    service.answer(LOST)
    with pytest.raises(Unreachable, match="no answer to POST jobs/claim .* not sent again"):
        _client(service.url, waits).post("jobs/claim", {})
    assert len(service.seen) == 1
    service.answer(LOST)
    assert _client(service.url, waits).post("jobs/j/complete", {}, idempotent=True) == {"ok": True}
    service.answer(LOST)
    assert _client(service.url, waits).get("jobs") == {"ok": True}
    assert [m for m, _, _ in service.seen] == ["GET", "GET"]


def test_a_connection_never_opened_is_retried_for_every_method() -> None:
    with socket.socket() as probe:   # a port that was free a moment ago: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    waits: list[float] = []
    with pytest.raises(Unreachable, match="unreachable after 4 attempts"):
        _client(f"http://127.0.0.1:{port}", waits).post("jobs/claim", {})
    assert waits == [0.5, 1.0, 2.0]
    with pytest.raises(Unreachable, match="unreachable after 1 attempt;"):
        _client(f"http://127.0.0.1:{port}", waits).post("agents/a/heartbeat", {}, retries=0)
    assert waits == [0.5, 1.0, 2.0]


def test_a_plain_session_follows_the_same_rule(service: ScriptedService) -> None:
    """`http.session`, as the alert webhook uses it: keyed or idempotent requests only."""
    waits: list[float] = []
    with http.session(http.retry_policy(2, backoff_s=0.25, sleep=waits.append)) as session:
        service.answer(502)
        assert session.post(f"{service.url}/hook", json={"text": "x"}, timeout=5).status_code == 502
        service.answer(502, 502)
        assert session.post(f"{service.url}/hook", json={}, headers=http.idempotency_key(), timeout=5).ok
        assert len(service.seen) == 3 and waits == [0.25, 0.5]


def test_resendable_is_the_one_rule() -> None:
    assert all(http.resendable(m) for m in ("GET", "head", "PUT", "DELETE", "OPTIONS"))
    assert not any(http.resendable(m) for m in ("POST", "PATCH"))
    assert http.resendable("POST", {"idempotency-key": "k"}) and not http.resendable("PATCH", {"Idempotency-Key": "k"})
