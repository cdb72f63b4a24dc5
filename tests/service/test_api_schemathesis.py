"""schemathesis over every operation of the service's OpenAPI, on both stores (issue 18).

The service is the real stack: `create_app` served by uvicorn on a loopback port (as `benchfarm
serve` does), in front of a store with history worth reading (tests/service/web/demo_store.py: commits,
series, change points, a pull request, agents with running, waiting and failed jobs) and a
GitHub webhook secret. Each request carries the token of exactly the scope its route requires
(agent, user or admin: the operation's OpenAPI security names it), none for open reads, so the
object-level rules are exercised as an agent meets them, not bypassed by an admin token.

The bound: seed 18; per operation, the examples phase, the coverage phase (boundary and
wrong-type values of every parameter and body field: 2^63 ids, empty and oversized strings,
missing required fields) and `MAX_EXAMPLES` (25) fuzzed cases, positive and negative. Checks:
no 5xx (`not_a_server_error`), every response body valid against the operation's declared
schema (`response_schema_conformance`), declared status codes and content types. Each case is
generated once and sent to both stores' services (the seed fixes the cases: two runs, one per store,
sent the same 5,426 requests and got the same statuses, for 19 % more CPU). On a 2-core machine: 47
operations, ~190 s with the stores' set-up; the run's figures (operations, requests, statuses,
seconds) are printed at the end of each store's run (`pytest -s`).

The schema is read at import from the app itself (it depends on no store) and parametrized per
operation: schemathesis' lazy `from_fixture` loader fails on pytest 9.2.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy import Engine, create_engine

from pipeline.config import DispatchSettings, GitHubSettings, Settings
from pipeline.service import auth
from pipeline.service.app import create_app
from pipeline.results.store.db import open_store, session_scope
from tests.helpers.live_server import live_server
from tests.service.web import demo_store

from tests.helpers.stores import fresh_database

SEED = 18
STORES = ("sqlite", "postgresql")
MAX_EXAMPLES = 25
CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance, content_type_conformance]


def operation_scopes(spec: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(METHOD, path) -> the scope the operation's OpenAPI security names, for those that have one."""
    return {(method.upper(), path): requirement["token"][0]
            for path, operations in spec["paths"].items() for method, operation in operations.items()
            for requirement in operation.get("security", [])}


@dataclass
class Api:
    url: str
    engine: Engine
    tokens: dict[str, str]
    scopes: dict[tuple[str, str], str]
    requests: int = 0
    operations: set[str] = field(default_factory=set)
    statuses: dict[int, int] = field(default_factory=dict)

    def headers(self, method: str, path: str) -> dict[str, str]:
        scope = self.scopes.get((method.upper(), path))
        return {"authorization": f"Bearer {self.tokens[scope]}"} if scope else {}


@contextmanager
def _served(dialect: str, home: Path) -> Iterator[Api]:
    """The service in front of a demo store on `dialect` (the store is built once: ~10 s)."""
    with fresh_database(dialect, home) as database_url:
        engine = open_store(database_url)
        try:
            demo = demo_store.build(engine, commits=10, samples=6, evil=False)
            demo_store.add_farm(engine, demo)
            with session_scope(engine) as s:
                tokens: dict[str, str] = {
                    scope: auth.create_token(s, name=f"{scope}-token", scopes=[scope]) for scope in auth.SCOPES}
            settings_ = Settings(home=home, github=GitHubSettings(webhook_secret="schemathesis-secret"),
                                 dispatch=DispatchSettings(claim_wait_s=0.05, claim_poll_s=0.02))
            app = create_app(settings_, engine)
            started = time.monotonic()
            with live_server(app) as url:
                spec = requests.get(f"{url}/openapi.json", timeout=30).json()
                yield (found := Api(url, engine, tokens, operation_scopes(spec)))
            print(f"\nschemathesis on {engine.dialect.name}: {len(found.operations)} operations, {found.requests} "
                  f"requests in {time.monotonic() - started:.1f} s, statuses {dict(sorted(found.statuses.items()))}")
        finally:
            engine.dispose()


# A parameter (one value) gives each operation's test its own id: schemathesis names an unparametrized
# test after the function alone on pytest 9, and pytest-xdist then runs one test for all 47 operations.
@pytest.fixture(scope="module", params=[STORES], ids=["+".join(STORES)])
def apis(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Api]]:
    """One service per store, both answering every generated case (the cases are generated once)."""
    with ExitStack() as stack:
        yield [stack.enter_context(_served(dialect, tmp_path_factory.mktemp(f"schemathesis-{dialect}")))
               for dialect in request.param]


def _schema() -> Any:
    """The service's OpenAPI document, as schemathesis reads it (the document depends on no store)."""
    config = schemathesis.Config.from_dict({
        "seed": SEED,
        "generation": {"max-examples": MAX_EXAMPLES, "mode": "all", "with-security-parameters": False},
        "phases": {"examples": {"enabled": True}, "coverage": {"enabled": True}, "fuzzing": {"enabled": True},
                   "stateful": {"enabled": False}},
    })
    app = create_app(Settings(home=Path("/nonexistent")), create_engine("sqlite://"))
    return schemathesis.openapi.from_dict(app.openapi(), config=config)


schema = _schema()


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
def test_every_operation_answers_within_its_schema(case: schemathesis.Case, apis: list[Api]) -> None:
    for api in apis:
        response = case.call(base_url=api.url, headers=api.headers(case.method, case.path), timeout=30)
        api.requests += 1
        api.operations.add(case.operation.label)
        api.statuses[response.status_code] = api.statuses.get(response.status_code, 0) + 1
        try:
            case.validate_response(response, checks=CHECKS)
        except Exception as failure:
            failure.add_note(f"the service on {api.engine.dialect.name}")
            raise
