"""What a device agent host installs (issue 15): `benchfarm[agent]` brings no compiler, no store and
no web service, and the agent's code never imports them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVICE_AND_COMPILERS = ("triton", "iree-base-compiler", "fastapi", "sqlalchemy", "psycopg", "psycopg-binary",
                         "alembic", "uvicorn", "scipy", "jinja2", "pygithub")
BLOCKED_MODULES = ("triton", "iree.compiler", "fastapi", "sqlalchemy", "psycopg", "alembic", "uvicorn", "scipy",
                   "jinja2", "github", "starlette")


def _run_blocked(code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter in which importing any of BLOCKED_MODULES fails, as on a host
    with only `benchfarm[agent]` installed."""
    block = f"import sys\nfor m in {BLOCKED_MODULES!r}:\n    sys.modules[m] = None\n"
    return subprocess.run([sys.executable, "-c", block + code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_agent_commands_run_without_the_service_or_the_compilers() -> None:
    for command in ("agent", "run-job"):
        proc = _run_blocked(f"sys.argv = ['benchfarm', '{command}', '--help']\n"
                            "import pipeline.cli\nraise SystemExit(pipeline.cli.main())")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "usage: benchfarm" in proc.stdout
    proc = _run_blocked("import pipeline.agents.agent, pipeline.agents.run_job, pipeline.agents.local\n"
                        "import pipeline.agents.runners.iree_runner, pipeline.agents.runners.adb_runner\n"
                        "print('imported')")
    assert proc.returncode == 0 and "imported" in proc.stdout, proc.stderr[-2000:]


def test_blocking_works() -> None:
    """The check above can fail: the service's modules do import a blocked package."""
    proc = _run_blocked("import pipeline.service.app")
    assert proc.returncode != 0 and "import of fastapi halted" in proc.stderr


def test_the_agent_extra_resolves_for_an_aarch64_board_without_service_or_compilers(tmp_path: Path) -> None:
    """pip's resolution of `.[agent]` for a 64-bit ARM single-board computer (CPython 3.11; glibc
    2.28 or newer, which IREE's aarch64 runtime wheel needs: Raspberry Pi OS bookworm has 2.36)."""
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--only-binary=:all:",
         "--platform", "manylinux_2_28_aarch64", "--platform", "manylinux2014_aarch64", "--python-version", "3.11",
         "--target", str(tmp_path / "x"), "--report", str(report), ".[agent]"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and ("Could not fetch URL" in proc.stderr or "NewConnectionError" in proc.stderr):
        pytest.skip(f"the package index is unreachable: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert "iree-base-runtime" in names and "benchfarm" in names, names
    assert not names & set(SERVICE_AND_COMPILERS), sorted(names & set(SERVICE_AND_COMPILERS))
