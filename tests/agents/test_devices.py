from __future__ import annotations

import os
import platform
import stat
from pathlib import Path

import pytest

from pipeline.agents.devices import (
    amd_devices,
    cuda_visible,
    discover_local_devices,
    nvidia_devices,
    parse_amd_smi,
    parse_nvidia_smi,
    parse_rocm_smi,
)


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


def test_a_locked_gpu_records_its_lock(caplog: pytest.LogCaptureFixture) -> None:
    """agent.gpu_lock_clocks is what the GPU unit asked nvidia-smi for; a GPU running inside that range
    records it in its device info, one outside it (the driver refused) is logged and records none."""
    text = ("NVIDIA H100 80GB HBM3, GPU-1111-aaaa, 560.35.03, 9.0, 1755 MHz, 1980 MHz\n"
            "NVIDIA H100 80GB HBM3, GPU-2222-bbbb, 560.35.03, 9.0, 345 MHz, 1980 MHz\n"
            "NVIDIA H100 80GB HBM3, GPU-3333-cccc, 560.35.03, 9.0, [N/A], [N/A]\n")
    locked, unlocked, unknown = parse_nvidia_smi(text, lock="1755,1755")
    assert locked.info.clocks_mhz == {"sm_max": 1980.0, "sm_lock_min": 1755.0, "sm_lock_max": 1755.0}
    assert unlocked.info.clocks_mhz == {"sm_max": 1980.0}
    assert unknown.info.clocks_mhz == {}
    assert "GPU-2222-bbbb runs its SM at 345 MHz, outside the lock 1755,1755: not locked" in caplog.text
    assert "GPU-1111" not in caplog.text
    assert parse_nvidia_smi(text)[0].info.clocks_mhz == {"sm_max": 1980.0}   # no lock asked for: none recorded


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


FOUR_H200 = "".join(f"NVIDIA H200, GPU-{i}{i}{i}{i}-abcd, 570.1, 9.0\n" for i in range(4))


@pytest.mark.parametrize(("spec", "expected"), [
    (None, ["GPU-0000", "GPU-1111", "GPU-2222", "GPU-3333"]),
    ("2", ["GPU-2222"]),
    ("3,1", ["GPU-3333", "GPU-1111"]),                 # CUDA's order is the variable's
    ("GPU-1111-abcd", ["GPU-1111"]),
    ("GPU-22,0", ["GPU-2222", "GPU-0000"]),            # a unique UUID prefix
    ("abcd,0", []),                                    # neither an index nor a UUID
    ("1,7,2", ["GPU-1111"]),                           # an entry naming no GPU ends the list
    ("GPU-,2", []),                                    # a prefix naming several: ends it at once
    ("1,1", ["GPU-1111"]),
    ("", []),                                          # set and empty: CUDA shows no GPU
])
def test_cuda_visible_devices_choose_the_gpus(spec: str | None, expected: list[str]) -> None:
    devices = parse_nvidia_smi(FOUR_H200)
    assert [d.info.uid[:8] for d in cuda_visible(devices, spec)] == expected


def test_an_agent_given_one_gpu_of_a_host_sees_only_that_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nvidia-smi lists every GPU whatever CUDA_VISIBLE_DEVICES says (the stand-in prints four):
    discovery applies the variable, so one agent (or run-job) per GPU picks its own, not the first."""
    _fake_smi(tmp_path, "printf '" + FOUR_H200.replace("\n", "\\n") + "'")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert len(nvidia_devices()) == 4
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert [d.info.uid for d in nvidia_devices()] == ["GPU-2222-abcd"]
    gpus = [d for d in discover_local_devices() if d.device_class.kind == "gpu"]
    assert [d.info.uid for d in gpus] == ["GPU-2222-abcd"]


# `amd-smi static --asic --json` as ROCm 6 prints it (one MI300X; fields trimmed to the ones read).
AMD_SMI_STATIC = """[{"gpu": 0, "asic": {"market_name": "AMD Instinct MI300X", "vendor_id": "0x1002",
  "device_id": "0x74a1", "rev_id": "0x00", "asic_serial": "0x5E1C2B3A4D5F6071", "oam_id": 0,
  "num_compute_units": 304, "target_graphics_version": "gfx942"}},
 {"gpu": 1, "asic": {"market_name": "AMD Instinct MI355X", "asic_serial": "N/A",
  "target_graphics_version": "gfx950"}}]"""

# `rocm-smi --showproductname --showuniqueid --json` (key case as older releases print it).
ROCM_SMI_PRODUCT = """{"card0": {"Card series": "AMD Instinct MI300X", "Card model": "0x74a1",
  "Card vendor": "Advanced Micro Devices, Inc. [AMD/ATI]", "Card SKU": "M3000100",
  "GFX Version": "gfx942", "Unique ID": "0x5e1c2b3a4d5f6071"}, "system": {"Driver version": "6.8.5"}}"""


def test_parse_amd_smi() -> None:
    first, second = parse_amd_smi(AMD_SMI_STATIC, host="mi-host")
    assert first.device_class.name == "amd-instinct-mi300x"
    assert first.device_class.targets == ["hip:gfx942"]
    assert (first.device_class.runtime, first.device_class.hal_driver) == ("iree", "hip")
    assert first.info.uid == "amd-0x5E1C2B3A4D5F6071"
    assert second.device_class.targets == ["hip:gfx950"] and second.info.uid == "mi-host-amd-1"
    wrapped = parse_amd_smi('{"gpu_data": ' + AMD_SMI_STATIC + "}")
    assert [d.device_class.targets for d in wrapped] == [["hip:gfx942"], ["hip:gfx950"]]
    assert parse_amd_smi('[{"gpu": 0, "asic": {"market_name": "x", "target_graphics_version": "N/A"}}]') == []


def test_parse_rocm_smi() -> None:
    (device,) = parse_rocm_smi(ROCM_SMI_PRODUCT, host="mi-host")
    assert device.device_class.name == "amd-instinct-mi300x"
    assert device.device_class.targets == ["hip:gfx942"]
    assert device.info.uid == "amd-0x5e1c2b3a4d5f6071"


def test_amd_tools_become_devices_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    system_path = os.environ["PATH"]
    monkeypatch.setenv("PATH", str(tmp_path))
    assert amd_devices() == []
    broken = tmp_path / "amd-smi"
    broken.write_text("#!/bin/sh\necho 'amdgpu driver not loaded' >&2; exit 3\n")
    broken.chmod(0o755)
    rocm = tmp_path / "rocm-smi"
    rocm.write_text("#!/bin/sh\ncat <<'JSON'\n" + ROCM_SMI_PRODUCT + "\nJSON\n")
    rocm.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{system_path}")
    assert [d.device_class.targets for d in amd_devices()] == [["hip:gfx942"]]   # amd-smi failed: rocm-smi
    assert "amd-instinct-mi300x" in [d.device_class.name for d in discover_local_devices()]
