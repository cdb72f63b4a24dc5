"""`benchfarm doctor` as a host runs it (a subprocess), against a real service on loopback: ready,
unreachable, a token without the agent scope, an unknown token, too little disk, a host lock
that cannot be opened."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.agents.counters import CountersUnavailable, PerfEventProfiler
from pipeline.config import Settings
from pipeline.service import auth
from pipeline.service.app import create_app
from pipeline.results.store.db import session_scope
from tests.helpers.cli_zygote import benchfarm_argv
from tests.helpers.live_server import free_port, live_server
from tests.helpers.stores import open_migrated


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    engine = open_migrated(f"sqlite:///{tmp_path / 'service.db'}")
    with session_scope(engine) as s:
        tokens = {scope: auth.create_token(s, name=f"{scope}-host", scopes=[scope]) for scope in ("agent", "user")}
    with live_server(create_app(Settings(home=tmp_path / "service"), engine)) as url:
        yield url, tokens
    engine.dispose()


def doctor(tmp_path: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")} | settings
    empty = tmp_path / "no-tools"
    empty.mkdir(exist_ok=True)   # a PATH with no nvidia-smi and no adb (CI installs adb for the phone tests)
    env.update(BENCHFARM_HOME=str(tmp_path / "host"), PATH=str(empty), COLUMNS="200")
    return subprocess.run([*benchfarm_argv(), "doctor", *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd=tmp_path)


def test_a_ready_host(service: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    url, tokens = service
    proc = doctor(tmp_path, "--server", url, "--token", tokens["agent"], "--min-free-gb", "0.001")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok  service:" in proc.stdout and "'agent-host' with scopes agent" in proc.stdout
    assert "skip  nvidia" in proc.stdout and "skip  adb" in proc.stdout
    assert "ok  host lock: /tmp/benchfarm-host.lock" in proc.stdout
    # hardware counters: taken here, or a warning in the words every result would carry
    try:
        PerfEventProfiler.open().close()
        assert "ok  counters (cpu): perf_event_open" in proc.stdout
    except CountersUnavailable as exc:
        assert f"warn  counters (cpu): {exc}" in proc.stdout
    off = doctor(tmp_path, "--server", url, "--token", tokens["agent"], "--min-free-gb", "0.001",
                 BENCHFARM_MEASUREMENT__COUNTERS="off")
    assert off.returncode == 0 and "skip  counters: off (measurement.counters)" in off.stdout


def test_each_problem_is_named_with_its_fix(service: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    url, tokens = service
    gone = doctor(tmp_path, "--server", f"http://127.0.0.1:{free_port()}", "--token", tokens["agent"])
    assert gone.returncode == 1 and "FAIL  service" in gone.stdout and "fix: start the service" in gone.stdout
    assert "not ready: service" in gone.stderr
    user = doctor(tmp_path, "--server", url, "--token", tokens["user"], "--min-free-gb", "0.001")
    assert user.returncode == 1 and "holds user, not agent" in user.stdout and "--scope agent" in user.stdout
    unknown = doctor(tmp_path, "--server", url, "--token", "bf_not-a-token", "--min-free-gb", "0.001")
    assert unknown.returncode == 1 and "FAIL  token: refused by the service: HTTP 401" in unknown.stdout
    full = doctor(tmp_path, "--server", url, "--token", tokens["agent"], "--min-free-gb", "1000000")
    assert full.returncode == 1 and "FAIL  disk" in full.stdout and "agent.work_dir" in full.stdout
    locked_out = doctor(tmp_path, "--server", url, "--token", tokens["agent"], "--min-free-gb", "0.001",
                        BENCHFARM_MEASUREMENT__HOST_LOCK=str(tmp_path / "no-such-dir" / "host.lock"))
    assert locked_out.returncode == 1 and "FAIL  host lock: cannot open the host lock" in locked_out.stdout
    assert "BENCHFARM_MEASUREMENT__HOST_LOCK" in locked_out.stdout


def test_one_machine_needs_no_token_but_a_farm_host_does(service: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    """After `benchfarm up` (its service on this machine, its agent in process with a token of its
    own), doctor with nothing configured is ready: no token is a warning. A host pointed at a service
    (agent.server_url, or --server) without a token is not."""
    url, _ = service
    alone = doctor(tmp_path, "--min-free-gb", "0.001", BENCHFARM_PUBLIC_URL=url)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert "ok  service:" in alone.stdout and "warn  token: none configured" in alone.stdout, alone.stdout
    joining = doctor(tmp_path, "--min-free-gb", "0.001", BENCHFARM_AGENT__SERVER_URL=url)
    assert joining.returncode == 1 and "FAIL  token: no token configured" in joining.stdout, joining.stdout
    assert "BENCHFARM_AGENT__TOKEN" in joining.stdout and "not ready: token" in joining.stderr
