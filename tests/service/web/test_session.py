"""The web UI's session cookie (pipeline/service/web/session.py) over real HTTP: sign-in and sign-out,
the cookie's flags and lifetime, tampered, foreign and expired cookies, CSRF refusals.

The session does not depend on the store: one SQLite store per test (tests/service/web/test_pages.py signs
in on both stores)."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
from itsdangerous import TimestampSigner
from sqlalchemy import Engine

from pipeline.config import Settings
from pipeline.service import users
from pipeline.service.app import create_app
from pipeline.service.web.session import COOKIE
from pipeline.results.store.db import session_scope
from tests.helpers.live_server import live_server
from tests.helpers.stores import open_migrated

PASSWORD = "correct horse battery"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Engine]:
    """A store with one password user, ada."""
    engine = open_migrated(f"sqlite:///{(tmp_path / 'store.db').as_posix()}")
    with session_scope(engine) as s:
        users.create_user(s, name="ada", password=PASSWORD)
    yield engine
    engine.dispose()


@contextmanager
def _serving(engine: Engine, home: Path, **web: Any) -> Iterator[str]:
    public_url = web.pop("public_url", "")
    settings = Settings(home=home, public_url=public_url, web=web)
    with live_server(create_app(settings, engine)) as url:
        yield url


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field in the page"
    return found.group(1)


def _sign_in(url: str, password: str = PASSWORD) -> tuple[requests.Session, requests.Response]:
    browser = requests.Session()
    page = browser.get(f"{url}/login", timeout=30)
    answer = browser.post(f"{url}/login", data={"csrf": _csrf(page.text), "next": "/", "name": "ada",
                                                "password": password}, timeout=30, allow_redirects=False)
    return browser, answer


def _signed_in_as(html: str) -> str | None:
    found = re.search(r'<span class="signed-in">([^<]*)</span>', html)
    return found.group(1) if found else None


def _as_replayed(url: str, cookie: str) -> str | None:
    """Who the service says is signed in for a request carrying `cookie` (a copy kept by anyone,
    not a browser's jar, which would drop it at its Max-Age)."""
    return _signed_in_as(requests.get(f"{url}/", cookies={COOKIE: cookie}, timeout=30).text)


def test_sign_in_and_sign_out(store: Engine, tmp_path: Path) -> None:
    with _serving(store, tmp_path, secret_key="one") as url:
        flags = [part.strip().lower() for part in requests.get(f"{url}/login", timeout=30)
                 .headers["set-cookie"].split(";")]
        assert flags[0].startswith(f"{COOKIE}=")
        assert {"path=/", "max-age=43200", "httponly", "samesite=lax"} <= set(flags)   # 12 h, the default
        assert "secure" not in flags   # public_url is http: a browser would drop a Secure cookie

        browser, refused = _sign_in(url, password="wrong password")
        assert refused.status_code == 401 and _signed_in_as(browser.get(f"{url}/", timeout=30).text) is None
        browser, signed = _sign_in(url)
        assert signed.status_code == 303 and signed.headers["location"] == "/"
        cookie = browser.cookies[COOKIE]
        stored = json.loads(base64.b64decode(cookie.split(".")[0]))
        assert stored["via"] == "password" and stored["user"] == "ada"
        assert PASSWORD not in json.dumps(stored)   # who signed in, never the password

        first = browser.get(f"{url}/", timeout=30)
        assert _signed_in_as(first.text) == "ada" and "signed in as ada" in first.text
        assert "set-cookie" in first.headers   # the flash message was shown: the session changed
        again = browser.get(f"{url}/", timeout=30)
        assert _signed_in_as(again.text) == "ada"
        assert "set-cookie" not in again.headers   # browsing alone does not re-sign the cookie

        no_csrf = browser.post(f"{url}/logout", timeout=30, allow_redirects=False)
        assert no_csrf.status_code == 403 and _signed_in_as(browser.get(f"{url}/", timeout=30).text) == "ada"
        out = browser.post(f"{url}/logout", data={"csrf": _csrf(again.text)}, timeout=30, allow_redirects=False)
        assert out.status_code == 303 and COOKIE not in browser.cookies   # the cookie is deleted
        assert _signed_in_as(browser.get(f"{url}/", timeout=30).text) is None


def test_secure_flag_and_lifetime_follow_the_settings(store: Engine, tmp_path: Path) -> None:
    with _serving(store, tmp_path, public_url="https://bench.example", session_hours=0.5) as url:
        flags = [part.strip().lower() for part in requests.get(f"{url}/login", timeout=30)
                 .headers["set-cookie"].split(";")]
        assert {"secure", "httponly", "samesite=lax", "max-age=1800"} <= set(flags)


def test_tampered_and_foreign_cookies_are_empty_sessions(store: Engine, tmp_path: Path) -> None:
    with _serving(store, tmp_path, secret_key="one") as url:
        cookie = _sign_in(url)[0].cookies[COOKIE]
        assert _as_replayed(url, cookie) == "ada"
        payload, stamp, signature = cookie.split(".")
        assert _as_replayed(url, f"{payload}.{stamp}.{signature[:-2]}AA") is None
        data = json.loads(base64.b64decode(payload))
        forged = base64.b64encode(json.dumps({**data, "via": "bootstrap"}).encode()).decode()
        assert _as_replayed(url, f"{forged}.{stamp}.{signature}") is None
        assert _as_replayed(url, "not-a-signed-cookie") is None
    with _serving(store, tmp_path, secret_key="one") as url:   # a restart, or a second process: same key
        assert _as_replayed(url, cookie) == "ada"
    with _serving(store, tmp_path, secret_key="two") as url:
        assert _as_replayed(url, cookie) is None
    with _serving(store, tmp_path) as url:   # no key set: a random one, this process's alone
        keyless = _sign_in(url)[0].cookies[COOKIE]
        assert _as_replayed(url, keyless) == "ada" and _as_replayed(url, cookie) is None
    with _serving(store, tmp_path) as url:
        assert _as_replayed(url, keyless) is None


class _SignedEarlier(TimestampSigner):
    """Signs as the service did `hours` ago: the cookie's timestamp is its issue time (no waiting)."""

    def __init__(self, key: str, hours: float) -> None:
        super().__init__(key)
        self.hours = hours

    def get_timestamp(self) -> int:
        return super().get_timestamp() - round(self.hours * 3600)


def test_an_expired_cookie_is_an_empty_session(store: Engine, tmp_path: Path) -> None:
    with _serving(store, tmp_path, secret_key="one", session_hours=1) as url:
        browser, _ = _sign_in(url)
        payload = browser.cookies[COOKIE].rsplit(".", 2)[0]
        younger = _SignedEarlier("one", 0.9).sign(payload).decode()   # the session, as issued 54 minutes ago
        page = requests.get(f"{url}/", cookies={COOKIE: younger}, timeout=30)
        assert _signed_in_as(page.text) == "ada"
        cookie = _SignedEarlier("one", 1.1).sign(payload).decode()    # 66 minutes ago: past its hour
        assert _as_replayed(url, cookie) is None
        stale = requests.post(f"{url}/logout", data={"csrf": _csrf(page.text)}, cookies={COOKIE: cookie},
                              timeout=30, allow_redirects=False)
        assert stale.status_code == 403   # its CSRF token ended with it
