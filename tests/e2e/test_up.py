"""`benchfarm up` as a new user runs it: the service starts, the in-process agent benchmarks HEAD,
and the results are served over HTTP (JSON API and pages) until the process is stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.helpers.live_server import free_port
from tests.helpers.suite_repo import GemmCase, case_id, gemm_suite_files, make_suite_repo

pytestmark = pytest.mark.e2e

CASES = [GemmCase("alpha", 64, 64, 64), GemmCase("beta", 32, 64, 128)]


def test_up_serves_a_benchmark_of_head(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, gemm_suite_files(CASES), name="suite-repo")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env.update(BENCHFARM_HOME=str(tmp_path / "home"), BENCHFARM_PORT=str(port))
    log_path = tmp_path / "up.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "up", "--suite", str(repo / "kernels")],
                                cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
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
        assert requests.get(f"{url}/runs/{runs[0]['id']}", timeout=10).status_code == 200
        assert requests.get(f"{url}/docs", timeout=10).status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, log_path.read_text()
    assert (tmp_path / "home" / "benchfarm.db").is_file()


def test_up_names_a_taken_port(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
        env.update(BENCHFARM_HOME=str(tmp_path / "home"), BENCHFARM_PORT=str(port))
        proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "up", "--no-run"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert f"127.0.0.1:{port}" in proc.stderr and "BENCHFARM_PORT" in proc.stderr


def test_wrong_setting_stops_the_command_with_its_name(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env.update(BENCHFARM_PORT="http")
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "run"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "BENCHFARM_PORT" in proc.stderr
