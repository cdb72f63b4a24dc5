"""A farm on loopback made of real processes: `benchfarm serve`, `benchfarm agent` (and `benchfarm
builder`) subprocesses sharing a suite checkout, with short leases and heartbeats, for the dispatcher's fault tests."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from tests.helpers.cli_zygote import REAL_BENCHFARM, benchfarm_argv
from tests.helpers.live_server import free_port

TOKEN = "bf_test_admin_token"
DEVICE_CLASS = "test-cpu"
FAST = {"BENCHFARM_MEASUREMENT__MIN_TIME_S": "0.05", "BENCHFARM_MEASUREMENT__MIN_SAMPLES": "4",
        "BENCHFARM_MEASUREMENT__MAX_TIME_S": "0.5", "BENCHFARM_MEASUREMENT__ROUNDS": "3"}  # a verdict needs 3 rounds


def slow(seconds: float) -> dict[str, str]:
    """Measurement settings that keep every case timing for about `seconds`."""
    return {"BENCHFARM_MEASUREMENT__MIN_TIME_S": str(seconds), "BENCHFARM_MEASUREMENT__MAX_TIME_S": str(seconds + 2),
            "BENCHFARM_MEASUREMENT__ROUNDS": "2"}


def base_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env.update(BENCHFARM_HOME=str(home), BENCHFARM_LOG_LEVEL="INFO")
    return env


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, period_s: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(period_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    cwd: Path
    proc: subprocess.Popen[bytes] | None = None
    prefix: list[str] = field(default_factory=list)
    """What the command runs under, e.g. `ip netns exec NS` (another host's network)."""

    def start(self) -> Proc:
        with self.log.open("a") as out:
            # another network namespace (a prefix) needs a process started there: the zygote's fork is not
            command = [*self.prefix, *REAL_BENCHFARM] if self.prefix else benchfarm_argv()
            self.proc = subprocess.Popen([*command, *self.argv], cwd=self.cwd, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


@dataclass
class Farm:
    root: Path
    suite: Path
    database_url: str = ""
    lease_s: float = 3.0
    port: int = field(default_factory=free_port)
    procs: list[Proc] = field(default_factory=list)
    host: str = "127.0.0.1"
    """Where this test process reaches the service."""
    listen: str = ""
    """The service's bind address (empty: `host`)."""
    agent_url: str = ""
    """Where agents reach the service (empty: `url`)."""
    netns: dict[str, str] = field(default_factory=dict)
    """Process name ("service" or an agent's) -> the network namespace it runs in."""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def host_lock(self) -> dict[str, str]:
        """The farm's own host lock (`pipeline.host_lock`), shared by its builder and agents: they wait for
        each other as on one host, never for another test's compiles on this machine (the default lock
        is machine-wide, and a busy CI machine held it for minutes)."""
        return {"BENCHFARM_MEASUREMENT__HOST_LOCK": str(self.root / "host.lock")}

    def _prefix(self, name: str) -> list[str]:
        return ["ip", "netns", "exec", self.netns[name]] if name in self.netns else []

    def service(self, extra_env: dict[str, str] | None = None) -> Proc:
        env = base_env(self.root / "service")
        env.update(BENCHFARM_HOST=self.listen or self.host, BENCHFARM_PORT=str(self.port), BENCHFARM_API_TOKEN=TOKEN,
                   BENCHFARM_DISPATCH__SUITE_PATH=str(self.suite), BENCHFARM_DISPATCH__LEASE_S=str(self.lease_s),
                   BENCHFARM_DISPATCH__CLAIM_WAIT_S="2", BENCHFARM_DISPATCH__CLAIM_POLL_S="0.1",
                   BENCHFARM_BUILD_WORKERS="2", **self.host_lock)
        if self.database_url:
            env["BENCHFARM_DATABASE_URL"] = self.database_url
        env.update(extra_env or {})
        proc = Proc("service", ["serve"], env, self.root / "service.log", self.root,
                    prefix=self._prefix("service")).start()
        self.procs.append(proc)
        wait_for(lambda: self._up(proc), 60, "the service to answer")
        return proc

    def builder(self, extra_env: dict[str, str] | None = None) -> Proc:
        """`benchfarm builder` beside a service started with BENCHFARM_DISPATCH__BUILDER=false: the same
        store and home (the service serves the bundles it writes), as the compose file runs them."""
        env = base_env(self.root / "service")
        # the service's lease: a builder renews its build every lease_s / 4 of its own settings, and the service
        # requeues a build silent for its lease_s (with the default 60 s here, every build was requeued after 3 s)
        env.update(BENCHFARM_BUILD_WORKERS="2", BENCHFARM_DISPATCH__LEASE_S=str(self.lease_s), **self.host_lock)
        if self.database_url:
            env["BENCHFARM_DATABASE_URL"] = self.database_url
        env.update(extra_env or {})
        proc = Proc("builder", ["builder", "--suite", str(self.suite)], env, self.root / "builder.log", self.root).start()
        self.procs.append(proc)
        return proc

    def _up(self, proc: Proc) -> bool:
        assert proc.alive(), proc.output()
        try:
            return requests.get(f"{self.url}/api/v1/jobs", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    def agent(self, name: str, extra_env: dict[str, str] | None = None) -> Proc:
        env = base_env(self.root / name)
        env.update(BENCHFARM_AGENT__HEARTBEAT_S="0.5", BENCHFARM_AGENT__RETRIES="1", BENCHFARM_AGENT__BACKOFF_S="0.2",
                   BENCHFARM_AGENT__BACKOFF_MAX_S="1", BENCHFARM_AGENT__TIMEOUT_S="10",
                   BENCHFARM_AGENT__DEVICE_CLASSES=json.dumps({"cpu-x86_64": DEVICE_CLASS, "cpu-aarch64": DEVICE_CLASS}),
                   BENCHFARM_AGENT__ONLY_CLASSES=json.dumps([DEVICE_CLASS]), **self.host_lock)
        env.update({**FAST, **(extra_env or {})})
        proc = Proc(name, ["agent", "--server", self.agent_url or self.url, "--token", TOKEN, "--name", name], env,
                    self.root / f"{name}.log", self.root, prefix=self._prefix(name)).start()
        self.procs.append(proc)
        return proc

    def spool(self, name: str) -> Path:
        return self.root / name / "agent" / "spool"

    def events(self, name: str) -> list[dict[str, Any]]:
        path = self.root / name / "agent" / "agent.log"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        response = requests.request(method, f"{self.url}/api/v1/{path}", headers={"Authorization": f"Bearer {TOKEN}"},
                                    timeout=10, **kwargs)
        assert response.status_code < 400, response.text
        return response.json()

    def trigger(self, cases: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self.api("POST", "runs", json={"ref": "HEAD", "device_classes": [DEVICE_CLASS],
                                                                "cases": cases})
        return result

    def job(self, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = self.api("GET", f"jobs/{job_id}")
        return job

    def register_device_class(self) -> None:
        """The service refuses a trigger for a class no agent registered: register one, no devices."""
        self.api("POST", "agents", json={"name": "registrar", "devices": [{
            "device_class": {"name": DEVICE_CLASS, "kind": "cpu", "targets": [_cpu_target()], "runtime": "iree",
                             "hal_driver": "local-sync"},
            "info": {"device_class": DEVICE_CLASS, "uid": "registrar-cpu"}}]})

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.kill(signal.SIGTERM)

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        if self.database_url:
            import psycopg

            with psycopg.connect(self.database_url) as connection:
                return list(connection.execute(sql.replace("?", "%s"), args).fetchall())
        with sqlite3.connect(self.root / "service" / "benchfarm.db") as connection:
            return list(connection.execute(sql, args).fetchall())

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.output()[-12000:]}" for p in self.procs)


def _cpu_target() -> str:
    import platform

    return "llvm-cpu:aarch64" if platform.machine().lower() in ("aarch64", "arm64") else "llvm-cpu:x86_64"
