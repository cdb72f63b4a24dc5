"""`benchfarm up` as a new user runs it: the service starts, the in-process agent benchmarks HEAD,
and the results are served over HTTP (JSON API and pages) until the process is stopped."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.helpers.cli_zygote import REAL_BENCHFARM, benchfarm_argv
from tests.helpers.live_server import free_port
from tests.helpers.suite_repo import GemmCase, case_id, gemm_suite_files, make_suite_repo

pytestmark = pytest.mark.e2e

CASES = [GemmCase("alpha", 64, 64, 64), GemmCase("beta", 32, 64, 128)]
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")
"""`benchfarm up`'s one log format (`pipeline.cli.main`'s logging)"""


def test_up_serves_a_benchmark_of_head(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, gemm_suite_files(CASES), name="suite-repo")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env.update(BENCHFARM_HOME=str(tmp_path / "home"))
    log_path = tmp_path / "up.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen([*benchfarm_argv(), "up", "--suite", str(repo / "kernels"),
                                 "--host", "127.0.0.2", "--port", str(port)], cwd=tmp_path, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.2:{port}"   # --host: not the default 127.0.0.1
    try:
        deadline = time.monotonic() + 300
        runs: list[dict] = []
        while time.monotonic() < deadline:
            assert proc.poll() is None, log_path.read_text()
            try:
                runs = requests.get(f"{url}/api/v1/runs", timeout=5).json()
            except requests.ConnectionError:
                runs = []
            if runs and runs[0]["status"] in ("done", "failed"):
                break
            time.sleep(0.5)
        assert runs and runs[0]["status"] == "done", log_path.read_text()
        run = requests.get(f"{url}/api/v1/runs/{runs[0]['id']}", timeout=10).json()
        (comparison,) = run["comparisons"]
        assert {r["case_id"] for r in comparison["rows"]} == {case_id(c) for c in CASES}
        assert {r["status"] for r in comparison["rows"]} == {"no baseline"}
        page = requests.get(f"{url}/", timeout=10).text
        assert all(case_id(c) in page for c in CASES)
        # the newest run with its verdict (issue 34: the dashboard showed nothing of what the run found)
        row = re.search(rf'<tr data-run="{runs[0]["id"]}">.*?</tr>', page, re.S)
        assert row and "<b>no baseline</b>" in row.group(0) and "2 no baseline" in row.group(0), page
        assert requests.get(f"{url}/runs/{runs[0]['id']}", timeout=10).status_code == 200
        assert requests.get(f"{url}/docs", timeout=10).status_code == 200
        ready = f"results ready at {url}/runs/{runs[0]['id']}"
        deadline = time.monotonic() + 15
        while ready not in log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.3)
        assert ready in log_path.read_text(), log_path.read_text()
        assert "GET /api/v1/runs" not in log_path.read_text()   # no access log unless -v
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, log_path.read_text()
    assert (tmp_path / "home" / "benchfarm.db").is_file()
    # one log format, the web server's and the in-process agent's lines too (issue 34: plain and JSON
    # lines mixed), and the long steps say how far they are
    text = log_path.read_text()
    odd = [line for line in text.splitlines() if line.strip() and not LOG_LINE.match(line)]
    assert odd == [], text
    assert not any(line.split(": ", 1)[1].startswith("{") for line in text.splitlines()), text   # no JSON line
    assert re.search(r"build of [0-9a-f]{10}: \w+ gemm/\S+ for \S+ \(1/2\)", text), text
    assert re.search(r"progress stage=timing: .* done=\d+ total=\d+", text), text


@pytest.mark.parametrize("command", ["up", "serve"])
def test_up_names_a_taken_port(tmp_path: Path, command: str) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
        env.update(BENCHFARM_HOME=str(tmp_path / "home"), BENCHFARM_PORT=str(port))
        proc = subprocess.run([*benchfarm_argv(), command, *(["--no-run"] if command == "up" else [])],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert f"127.0.0.1:{port}" in proc.stderr and "--port" in proc.stderr and "BENCHFARM_PORT" in proc.stderr
    assert "traceback" not in proc.stderr   # a CliError: what to do, nothing more


def test_wrong_setting_stops_the_command_with_its_name(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env.update(BENCHFARM_PORT="http")
    proc = subprocess.run([*benchfarm_argv(), "run"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "BENCHFARM_PORT" in proc.stderr


def _start_up(tmp_path: Path, env: dict[str, str], log_name: str, *args: str,
              command: Sequence[str] = ()) -> tuple[subprocess.Popen[bytes], Path]:
    log_path = tmp_path / log_name
    with log_path.open("w") as log:
        proc = subprocess.Popen([*(command or benchfarm_argv()), "up", *args], cwd=tmp_path, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    return proc, log_path


def _wait_for(proc: subprocess.Popen[bytes], log_path: Path, probe: Any, what: str, timeout_s: float = 300) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, log_path.read_text()
        try:
            found = probe()
        except requests.ConnectionError:
            found = None
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"no {what} within {timeout_s} s:\n{log_path.read_text()}")


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


def test_up_again_after_a_restart(tmp_path: Path) -> None:
    """A second `benchfarm up` on the same home: its in-process agent registers again (the first
    one's token is gone) and runs what is queued; between the two, the agent is shown offline."""
    repo = make_suite_repo(tmp_path, gemm_suite_files(CASES), name="suite-repo")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env.update(BENCHFARM_HOME=str(tmp_path / "home"), BENCHFARM_PORT=str(port))
    url = f"http://127.0.0.1:{port}"

    def embedded_agent() -> dict[str, Any] | None:
        agents = requests.get(f"{url}/api/v1/agents", timeout=5).json()
        return next((a for a in agents if a["name"] == "embedded" and a["devices"]), None)

    first, first_log = _start_up(tmp_path, env, "up-1.log", "--no-run", "--suite", str(repo / "kernels"))
    try:
        registered = _wait_for(first, first_log, embedded_agent, "registered agent", 120)
    finally:
        assert _stop(first) == 0, first_log.read_text()
    assert registered["state"] == "online"
    # stopped while its agent's claim was waiting: no request cancelled with a traceback
    assert "Traceback" not in first_log.read_text(), first_log.read_text()

    second, second_log = _start_up(tmp_path, env, "up-2.log", "--suite", str(repo / "kernels"))
    try:
        # right after the start the store still holds the first process's agent: it must not look online
        agents = _wait_for(second, second_log, lambda: requests.get(f"{url}/api/v1/agents", timeout=5).json(),
                           "agent list", 120)
        assert all(not d["online"] for a in agents if a["token_name"] == registered["token_name"]
                   for d in a["devices"]), agents

        def finished_run() -> dict[str, Any] | None:
            runs = requests.get(f"{url}/api/v1/runs", timeout=5).json()
            return runs[0] if runs and runs[0]["status"] in ("done", "failed") else None

        run = _wait_for(second, second_log, finished_run, "finished run")
        assert run["status"] == "done", second_log.read_text()
        again = embedded_agent()
        assert again is not None and again["state"] == "online" and again["token_name"] != registered["token_name"]
    finally:
        assert _stop(second) == 0, second_log.read_text()
    assert "HTTP 403" not in second_log.read_text()


def test_a_second_up_on_the_same_folder_is_refused_naming_the_first(tmp_path: Path) -> None:
    """Two `benchfarm up` on one BENCHFARM_HOME would share its store, agent spool and check cache:
    the second is refused with the first one's pid. The lock goes with the first (released on exit),
    and a lock file a dead process left is taken over."""
    repo = make_suite_repo(tmp_path, gemm_suite_files(CASES[:1]), name="suite-repo")
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env.update(BENCHFARM_HOME=str(home))
    lock = home / "up.lock"

    def serving(proc: subprocess.Popen[bytes], port: int) -> bool:
        held = lock.is_file() and lock.read_text().strip() == str(proc.pid)
        return held and requests.get(f"http://127.0.0.1:{port}/api/v1/runs", timeout=5).status_code == 200

    port = free_port()
    # the lock names the process's pid: the real entry point (a zygote's fork has a pid of its own)
    first, first_log = _start_up(tmp_path, env | {"BENCHFARM_PORT": str(port)}, "up-1.log", "--no-run",
                                 "--suite", str(repo / "kernels"), command=REAL_BENCHFARM)
    try:
        _wait_for(first, first_log, lambda: serving(first, port), "first up serving", 120)
        second = subprocess.run([*benchfarm_argv(), "up", "--no-run", "--suite",
                                 str(repo / "kernels")], cwd=tmp_path, env=env | {"BENCHFARM_PORT": str(free_port())},
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 1, second.stdout + second.stderr
        assert f"another benchfarm up (pid {first.pid}) serves from {home}" in second.stderr, second.stderr
        assert "BENCHFARM_HOME" in second.stderr and "traceback" not in second.stderr
        assert first.poll() is None, first_log.read_text()
    finally:
        assert _stop(first) == 0, first_log.read_text()
    assert lock.read_text() == ""   # released on exit

    dead = subprocess.Popen(["true"])
    dead.wait()
    lock.write_text(f"{dead.pid}\n")   # as a process killed outright leaves it
    port = free_port()
    third, third_log = _start_up(tmp_path, env | {"BENCHFARM_PORT": str(port)}, "up-3.log", "--no-run",
                                 "--suite", str(repo / "kernels"), command=REAL_BENCHFARM)
    try:
        _wait_for(third, third_log, lambda: serving(third, port), "up serving over a dead process's lock", 120)
    finally:
        assert _stop(third) == 0, third_log.read_text()
