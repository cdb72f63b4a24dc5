from __future__ import annotations

import os
import platform
import stat
from pathlib import Path

import pytest

from pipeline.agents.devices import discover_local_devices, nvidia_devices, parse_nvidia_smi


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86_64 host")
def test_the_host_cpu_is_always_there() -> None:
    first, again = discover_local_devices()[0], discover_local_devices()[0]
    cls = first.device_class
    assert (cls.name, cls.kind, cls.runtime, cls.hal_driver, cls.targets) == (
        "cpu-x86_64", "cpu", "iree", "local-sync", ["llvm-cpu:x86_64"])
    assert first.info.device_class == cls.name
    assert first.info.uid == again.info.uid and first.info.uid.startswith("host-")
    assert first.info.name


def test_parse_nvidia_smi() -> None:
    text = (
        "NVIDIA H100 80GB HBM3, GPU-1111-aaaa, 560.35.03, 9.0\n"
        "NVIDIA H100 80GB HBM3, GPU-2222-bbbb, 560.35.03, 9.0\n"
        "garbage line\n"
    )
    devices = parse_nvidia_smi(text, host="gpu-host")
    assert [d.info.uid for d in devices] == ["GPU-1111-aaaa", "GPU-2222-bbbb"]
    cls = devices[0].device_class
    assert (cls.name, cls.kind, cls.runtime, cls.targets) == ("nvidia-h100-80gb-hbm3", "gpu", "cuda", ["cuda:sm_90"])
    assert devices[0].info.driver == "560.35.03" and devices[0].info.host == "gpu-host"


def _fake_smi(folder: Path, body: str) -> None:
    script = folder / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_no_nvidia_smi_means_no_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert nvidia_devices() == []


def test_failing_nvidia_smi_means_no_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert nvidia_devices() == []


def test_nvidia_smi_output_becomes_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, "echo 'NVIDIA H200, GPU-3333, 570.1, 9.0'")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    names = [d.device_class.name for d in discover_local_devices()]
    assert "nvidia-h200" in names
