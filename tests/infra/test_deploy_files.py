"""The deployment files are valid for the tools that read them: systemd units by `systemd-analyze
verify`, the compose file by `docker compose config` (each skipped, with the reason, where the tool
is absent; `bash infra/local.sh test` installs the compose plugin where the docker CLI lacks it). Paths that exist only on a deployed host are pointed at this machine's equivalents."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "infra" / "agent"
COMPOSE = ROOT / "infra" / "compose"
UNITS = sorted(AGENT.glob("*.service"))


def _verify(unit: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    text = unit.read_text()
    benchfarm = Path(sys.executable).with_name("benchfarm")
    text = (text.replace("/usr/local/bin/benchfarm", str(benchfarm))
            .replace("/etc/benchfarm/agent.env", str(AGENT / "agent.env.example"))
            .replace("/usr/bin/adb", shutil.which("adb") or "/bin/true")
            .replace("/usr/bin/nvidia-smi", "/bin/true"))
    copy = tmp_path / unit.name
    copy.write_text(text)
    return subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed here")
@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
def test_systemd_units_verify(unit: Path, tmp_path: Path) -> None:
    proc = _verify(unit, tmp_path)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed here")
def test_systemd_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    broken = tmp_path / "broken.service"
    broken.write_text((AGENT / "benchfarm-agent.service").read_text().replace(
        "ExecStart=/usr/local/bin/benchfarm agent", "ExecStart=/nonexistent/benchfarm agent"))
    assert _verify(broken, tmp_path).returncode != 0


def test_units_and_compose_keep_secrets_out() -> None:
    for path in [*UNITS, COMPOSE / "compose.yaml", COMPOSE / "Dockerfile"]:
        text = path.read_text()
        assert "TOKEN=" not in text and "PASSWORD=" not in text, path
    assert "EnvironmentFile=/etc/benchfarm/agent.env" in (AGENT / "benchfarm-agent.service").read_text()
    ignored = (ROOT / ".gitignore").read_text()
    assert "infra/compose/benchfarm.env" in ignored and "infra/compose/db_password.txt" in ignored


def _has_compose() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "compose", "version"], capture_output=True, timeout=30).returncode == 0


def _compose_config(work: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "compose", "-f", str(work / "compose.yaml"), "config", "--quiet"],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def compose_copy(tmp_path: Path) -> Path:
    """The compose folder with its secrets' files made as a deployer makes them (git-ignored there)."""
    if not _has_compose():
        pytest.skip("the docker compose plugin is not installed here (`bash infra/local.sh test` installs it)")
    work = tmp_path / "compose"
    shutil.copytree(COMPOSE, work)
    (work / "benchfarm.env").write_text((COMPOSE / "benchfarm.env.example").read_text())
    (work / "db_password.txt").write_text("test\n")
    return work


def test_compose_file_is_valid(compose_copy: Path) -> None:
    proc = _compose_config(compose_copy)
    assert proc.returncode == 0, proc.stderr
    shown = subprocess.run(["docker", "compose", "-f", str(compose_copy / "compose.yaml"), "config", "--format", "json"],
                           capture_output=True, text=True, timeout=60)
    services = json.loads(shown.stdout)["services"]
    assert set(services) == {"db", "service", "builder"}
    db, service, builder = services["db"], services["service"], services["builder"]
    assert db["healthcheck"]["test"] and [v["target"] for v in db["volumes"]] == ["/var/lib/postgresql/data"]
    assert service["depends_on"]["db"]["condition"] == "service_healthy"
    # the service leaves the builds to the builder; both see the same suite checkout and bundles
    assert service["environment"]["BENCHFARM_DISPATCH__BUILDER"] == "false" and builder["command"] == ["builder"]
    assert service["environment"]["BENCHFARM_DISPATCH__SUITE_PATH"] == builder["environment"][
        "BENCHFARM_DISPATCH__SUITE_PATH"]
    assert [(v["source"], v["target"]) for v in service["volumes"]] == [
        (v["source"], v["target"]) for v in builder["volumes"]] == [("home", "/var/lib/benchfarm")]
    assert builder["depends_on"]["service"]["condition"] == "service_healthy" and builder["healthcheck"]["disable"]


def test_compose_config_catches_a_broken_file(compose_copy: Path) -> None:
    compose = compose_copy / "compose.yaml"
    # one condition broken (with several, compose names whichever it meets first: CI saw the builder's)
    compose.write_text(compose.read_text().replace("condition: service_healthy", "condition: service_ready", 1))
    proc = _compose_config(compose_copy)
    assert proc.returncode != 0 and ".depends_on." in proc.stderr and "condition value must be one of" in proc.stderr, \
        proc.stderr


@pytest.mark.parametrize("example", [AGENT / "agent.env.example", COMPOSE / "benchfarm.env.example"],
                         ids=["agent.env.example", "benchfarm.env.example"])
def test_environment_examples_are_settings_benchfarm_reads(example: Path, monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    """Every BENCHFARM_ line of an example, the commented-out ones too, is a setting: benchfarm refuses
    to start on an unknown one (a GPU unit once named BENCHFARM_GPU_LOCK_CLOCKS)."""
    from pipeline.config import load_settings

    for name in [k for k in os.environ if k.startswith("BENCHFARM_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    named = []
    for line in example.read_text().splitlines():
        key, _, value = line.lstrip("# ").partition("=")
        if key.startswith("BENCHFARM_") and " " not in key:
            monkeypatch.setenv(key, value or "x")
            named.append(key)
    assert named
    settings = load_settings()
    if example.name == "agent.env.example":
        assert settings.agent.gpu_lock_clocks == "1755,1755"


def test_every_setting_the_deployment_files_name_exists(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A BENCHFARM_ name in a unit, hook, compose or pipeline file that is no setting stops every
    benchfarm command where it is set ("unknown setting"): each one named in infra/ is known."""
    import re

    from pipeline.config import SettingsError, load_settings

    names = sorted({m for path in (ROOT / "infra").rglob("*") if path.is_file()
                    for m in re.findall(r"BENCHFARM_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="replace"))})
    assert "BENCHFARM_AGENT__TOKEN" in names and "BENCHFARM_PIPELINE_DEVICE_CLASSES" in names
    monkeypatch.chdir(tmp_path)
    unknown = []
    for name in names:
        with monkeypatch.context() as env:
            for other in [k for k in os.environ if k.startswith("BENCHFARM_")]:
                env.delenv(other)
            env.setenv(name, "1")
            try:
                load_settings()
            except SettingsError as exc:
                if str(exc).startswith(f"unknown setting {name}"):
                    unknown.append(name)
    assert unknown == [], unknown
