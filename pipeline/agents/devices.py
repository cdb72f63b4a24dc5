"""Discover the devices this host can benchmark: always its CPU, NVIDIA GPUs via nvidia-smi, and
Android phones through adb where the phone settings enable them (`pipeline.agents.adb`)."""

from __future__ import annotations

import hashlib
import logging
import platform
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pipeline.agents.adb import AdbTransport, phone_devices
from pipeline.config import PhoneSettings
from pipeline.contracts import DeviceClass, DeviceInfo

log = logging.getLogger(__name__)

CPU_HAL_DRIVER = "local-sync"  # one thread, no task system: the least noisy on small shared hosts
NVIDIA_SMI_TIMEOUT_S = 10
_NVIDIA_QUERY = "name,uuid,driver_version,compute_cap"

__all__ = ["LocalDevice", "Transport", "LOCAL", "AdbTransport", "discover_local_devices", "cpu_device", "nvidia_devices", "parse_nvidia_smi"]


LOCAL = "local"
Transport = str | AdbTransport
"""How the agent reaches a device, as plain data: LOCAL (this host's CPU and GPUs) or an
AdbTransport (a phone's serial and CPU mask). Only the runner selection reads it."""


@dataclass(frozen=True)
class LocalDevice:
    device_class: DeviceClass
    info: DeviceInfo
    transport: Transport = LOCAL


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _host_uid() -> str:
    """Stable per host: a hash of the machine id (hostname where there is none)."""
    for path in (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id")):
        try:
            seed = path.read_text().strip()
        except OSError:
            continue
        if seed:
            break
    else:
        seed = socket.gethostname()
    return "host-" + hashlib.sha256(seed.encode()).hexdigest()[:16]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Hardware", "Model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_arch() -> str | None:
    machine = platform.machine().lower()
    return {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(machine)


def cpu_device() -> LocalDevice | None:
    arch = _cpu_arch()
    if arch is None:
        log.warning("no CPU target for machine type %s", platform.machine())
        return None
    device_class = DeviceClass(
        name=f"cpu-{arch}",
        kind="cpu", targets=[f"llvm-cpu:{arch}"], runtime="iree", hal_driver=CPU_HAL_DRIVER,
        description=f"host CPU ({arch}), IREE {CPU_HAL_DRIVER}",
    )
    info = DeviceInfo(
        device_class=device_class.name, uid=_host_uid(), name=_cpu_model(),
        driver=f"linux {platform.release()}" if platform.system() == "Linux" else platform.system(),
        host=socket.gethostname(),
    )
    return LocalDevice(device_class=device_class, info=info)


def parse_nvidia_smi(text: str, host: str = "") -> list[LocalDevice]:
    """Devices from `nvidia-smi --query-gpu=name,uuid,driver_version,compute_cap --format=csv,noheader`."""
    devices = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4 or not fields[1]:
            continue
        name, uuid, driver, cc = fields
        if not re.fullmatch(r"\d+\.\d+", cc):
            continue
        sm = cc.replace(".", "")
        device_class = DeviceClass(
            name=slug(name), kind="gpu", targets=[f"cuda:sm_{sm}"], runtime="cuda", description=name,
        )
        devices.append(LocalDevice(device_class, DeviceInfo(
            device_class=device_class.name, uid=uuid, name=name, driver=driver, host=host,
        )))
    return devices


def nvidia_devices() -> list[LocalDevice]:
    """NVIDIA GPUs, or nothing where nvidia-smi is absent or fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        proc = subprocess.run(
            [smi, f"--query-gpu={_NVIDIA_QUERY}", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("nvidia-smi failed: %s", exc)
        return []
    if proc.returncode != 0:
        log.warning("nvidia-smi exited %d: %s", proc.returncode, proc.stderr.strip()[-500:])
        return []
    return parse_nvidia_smi(proc.stdout, host=socket.gethostname())


def discover_local_devices(phones: PhoneSettings | None = None) -> list[LocalDevice]:
    """The host's CPU and NVIDIA GPUs; and its phones (one device per CPU cluster) when `phones`
    is given with `enabled` set (a host without adb, or whose adb fails, simply has none)."""
    cpu = cpu_device()
    found = ([cpu] if cpu else []) + nvidia_devices()
    if phones is not None and phones.enabled:
        from pipeline.agents.adb import AdbError

        try:
            found += phone_devices(phones)
        except AdbError as exc:
            log.warning("phone discovery failed: %s", exc)
    return found
