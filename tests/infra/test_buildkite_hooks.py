"""The Buildkite agent hooks of infra/buildkite run as the agent runs them (bash, its environment):
a run-job step goes ahead only on a host with its device class, in its queue, that passes doctor."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.agents.devices import cpu_device
from pipeline.config import Settings
from pipeline.service import auth
from pipeline.service.app import create_app
from pipeline.results.store.db import session_scope
from tests.helpers.live_server import live_server
from tests.helpers.stores import open_migrated

HOOK = Path(__file__).resolve().parents[2] / "infra" / "buildkite" / "hooks" / "pre-command"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, str]]:
    engine = open_migrated(f"sqlite:///{tmp_path / 'service.db'}")
    with session_scope(engine) as s:
        token = auth.create_token(s, name="bk-host", scopes=["agent"])
    with live_server(create_app(Settings(home=tmp_path / "service"), engine)) as url:
        yield url, token
    engine.dispose()


def _tools(tmp_path: Path) -> Path:
    """The commands the hook uses, and not adb or nvidia-smi (doctor checks those where they exist)."""
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    for name in ("sed", "grep", "hostname", "cat"):
        found = shutil.which(name)
        if found and not (tools / name).exists():
            (tools / name).symlink_to(found)
    return tools


def hook(tmp_path: Path, url: str, token: str, command: str, queue: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env.update(BUILDKITE_COMMAND=command, BUILDKITE_AGENT_META_DATA_QUEUE=queue, BENCHFARM_HOME=str(tmp_path / "h"),
               BENCHFARM_AGENT__SERVER_URL=url, BENCHFARM_AGENT__TOKEN=token,
               PATH=f"{Path(sys.executable).parent}:{_tools(tmp_path)}")
    return subprocess.run([shutil.which("bash") or "/bin/bash", str(HOOK)], capture_output=True, text=True, env=env, timeout=120)


def test_pre_command_checks_class_queue_and_health(service: tuple[str, str], tmp_path: Path) -> None:
    device = cpu_device()
    if device is None:
        pytest.skip("no host CPU device class here")
    name = device.device_class.name
    url, token = service
    run_job = f"benchfarm run-job --bundle bundles/head --device-class {name}"
    ok = hook(tmp_path, url, token, run_job, f"benchfarm-{name}")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "ok  token" in ok.stdout
    other = hook(tmp_path, url, token, "benchfarm run-job --bundle b --device-class gpu-h100", "benchfarm-gpu-h100")
    assert other.returncode == 1 and "no device of class 'gpu-h100'" in other.stderr
    queue = hook(tmp_path, url, token, run_job, "benchfarm-builder")
    assert queue.returncode == 1 and "serves queue 'benchfarm-builder'" in queue.stderr
    unhealthy = hook(tmp_path, url, "bf_wrong", run_job, f"benchfarm-{name}")
    assert unhealthy.returncode == 1 and "FAIL  token" in unhealthy.stdout
    other_step = hook(tmp_path, url, "bf_wrong", "make test", "benchfarm-builder")
    assert other_step.returncode == 0   # only run-job steps are checked
