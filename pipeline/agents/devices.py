"""Discover the devices this host can benchmark: always its CPU, NVIDIA GPUs via nvidia-smi, AMD GPUs
via amd-smi or rocm-smi, and
Android phones through adb where the phone settings enable them (`pipeline.agents.adb`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
import shutil
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.agents.adb import Adb, AdbError, AdbTransport, cpu_clusters, parse_getprop
from pipeline.config import PhoneSettings
from pipeline.contracts import DeviceClass, DeviceInfo, Target

log = logging.getLogger(__name__)

CPU_HAL_DRIVER = "local-sync"  # one thread, no task system: the least noisy on small shared hosts
PHONE_HAL_DRIVER = "local-sync"   # one thread, pinned by taskset to one cluster
NVIDIA_SMI_TIMEOUT_S = 10
_NVIDIA_QUERY = "name,uuid,driver_version,compute_cap,clocks.sm,clocks.max.sm"

__all__ = ["LocalDevice", "Transport", "LOCAL", "AdbTransport", "NoDeviceForTarget", "discover_local_devices",
           "plan_targets", "cpu_device", "cuda_visible", "nvidia_devices", "parse_nvidia_smi",
           "phone_devices"]


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


def _mhz(field: str) -> float | None:
    """A clock as nvidia-smi's CSV gives it ("1980 MHz", "1980"; "[N/A]" where unsupported)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(?: MHz)?", field.strip())
    return float(match.group(1)) if match else None


def parse_nvidia_smi(text: str, host: str = "", lock: str = "") -> list[LocalDevice]:
    """Devices from `nvidia-smi --query-gpu=name,uuid,driver_version,compute_cap,clocks.sm,clocks.max.sm
    --format=csv,noheader` (the clocks may be missing). `lock`: "MIN,MAX" MHz the host's unit locks the
    SM clocks to (agent.gpu_lock_clocks); a GPU whose SM clock is inside that range records it in its
    device info (`clocks_mhz` sm_lock_min/max, beside sm_max), one outside it is logged as not locked."""
    low, high = (float(v) for v in lock.split(",")) if lock else (None, None)
    devices = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) not in (4, 6) or not fields[1]:
            continue
        name, uuid, driver, cc = fields[:4]
        if not re.fullmatch(r"\d+\.\d+", cc):
            continue
        now, top = (_mhz(fields[4]), _mhz(fields[5])) if len(fields) == 6 else (None, None)
        clocks = {"sm_max": top} if top is not None else {}   # the clock of this moment is the samples' business
        if low is not None and high is not None and now is not None:
            if low <= now <= high:
                clocks.update(sm_lock_min=low, sm_lock_max=high)
            else:
                log.warning("GPU %s runs its SM at %.0f MHz, outside the lock %s: not locked (the driver refused "
                            "nvidia-smi --lock-gpu-clocks, or the unit did not run it)", uuid, now, lock)
        sm = cc.replace(".", "")
        device_class = DeviceClass(
            name=slug(name), kind="gpu", targets=[f"cuda:sm_{sm}"], runtime="cuda", description=name,
        )
        devices.append(LocalDevice(device_class, DeviceInfo(
            device_class=device_class.name, uid=uuid, name=name, driver=driver, host=host, clocks_mhz=clocks,
        )))
    return devices


def cuda_visible(devices: list[LocalDevice], spec: str | None) -> list[LocalDevice]:
    """The GPUs CUDA shows a process under CUDA_VISIBLE_DEVICES=`spec` (None: unset, all), in its
    order. nvidia-smi ignores the variable, so an agent or `run-job` given one GPU of a host (one agent
    per GPU) would otherwise pick the host's first. Entries are nvidia-smi indices (the PCI order,
    CUDA's own for GPUs of one model) or UUIDs ("GPU-...", or a unique prefix of one); as in CUDA, an entry
    that names no GPU ends the list, and an empty value hides every GPU. MIG instances are not
    listed by nvidia-smi --query-gpu: an entry naming one ends the list (logged)."""
    if spec is None:
        return devices
    chosen: list[LocalDevice] = []
    for entry in (e.strip() for e in spec.split(",")):
        if entry.isdigit():
            found = [devices[int(entry)]] if int(entry) < len(devices) else []
        else:
            found = [d for d in devices if entry.startswith("GPU-") and d.info.uid.startswith(entry)]
        if len(found) != 1 or found[0] in chosen:
            if entry:
                log.warning("CUDA_VISIBLE_DEVICES=%s: %r names no single GPU of this host; the GPUs before it "
                            "are used", spec, entry)
            break
        chosen.append(found[0])
    return chosen


def nvidia_devices(lock: str = "") -> list[LocalDevice]:
    """NVIDIA GPUs (those CUDA_VISIBLE_DEVICES shows, `cuda_visible`), or nothing where nvidia-smi is
    absent or fails; `lock` as `parse_nvidia_smi`'s."""
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
    return cuda_visible(parse_nvidia_smi(proc.stdout, host=socket.gethostname(), lock=lock),
                        os.environ.get("CUDA_VISIBLE_DEVICES"))


def _amd_class(name: str, gfx: str) -> DeviceClass:
    """AMD GPUs run the suite's IREE HIP artifacts through IREE's `hip` HAL driver."""
    return DeviceClass(name=slug(name), kind="gpu", targets=[f"hip:{gfx}"], runtime="iree", hal_driver="hip",
                       description=name)


def _amd_device(name: str, gfx: str, uid: str, driver: str | None, host: str) -> LocalDevice | None:
    if not re.fullmatch(r"gfx[0-9a-f]+", gfx or ""):
        return None
    device_class = _amd_class(name or gfx, gfx)
    return LocalDevice(device_class, DeviceInfo(device_class=device_class.name, uid=uid or f"{host}-{gfx}",
                                                name=name, driver=driver, host=host))


def parse_amd_smi(static_json: str, host: str = "") -> list[LocalDevice]:
    """Devices from `amd-smi static --asic --json`: a list of {gpu, asic: {market_name,
    target_graphics_version, asic_serial, ...}} (ROCm 6), or the same list under "gpu_data" (ROCm 7)."""
    data = json.loads(static_json)
    entries = data.get("gpu_data", []) if isinstance(data, dict) else data
    devices = []
    for entry in entries if isinstance(entries, list) else []:
        asic = entry.get("asic", {}) if isinstance(entry, dict) else {}
        serial = str(asic.get("asic_serial") or "")
        uid = f"amd-{serial}" if serial and serial.lower() not in ("n/a", "0x0") else f"{host}-amd-{entry.get('gpu')}"
        found = _amd_device(str(asic.get("market_name") or ""), str(asic.get("target_graphics_version") or ""),
                            uid, None, host)
        if found:
            devices.append(found)
    return devices


def parse_rocm_smi(product_json: str, host: str = "") -> list[LocalDevice]:
    """Devices from `rocm-smi --showproductname --showuniqueid --json`: {"card0": {"Card Series": ...,
    "GFX Version": "gfx942", "Unique ID": ...}} (key case varies between ROCm releases)."""
    devices = []
    for card, fields in sorted(json.loads(product_json).items()):
        if not card.startswith("card") or not isinstance(fields, dict):
            continue
        lower = {k.lower(): str(v) for k, v in fields.items()}
        uid = lower.get("unique id", "")
        found = _amd_device(lower.get("card series") or lower.get("card model", ""), lower.get("gfx version", ""),
                            f"amd-{uid}" if uid and uid.lower() != "n/a" else f"{host}-{card}", None, host)
        if found:
            devices.append(found)
    return devices


def amd_devices() -> list[LocalDevice]:
    """AMD GPUs through amd-smi, else rocm-smi; nothing where neither is installed or both fail."""
    host = socket.gethostname()
    for tool, args, parse in (("amd-smi", ["static", "--asic", "--json"], parse_amd_smi),
                              ("rocm-smi", ["--showproductname", "--showuniqueid", "--json"], parse_rocm_smi)):
        path = shutil.which(tool)
        if path is None:
            continue
        try:
            proc = subprocess.run([path, *args], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S,
                                  check=False)
            if proc.returncode == 0:
                return parse(proc.stdout, host)
            log.warning("%s exited %d: %s", tool, proc.returncode, proc.stderr.strip()[-500:])
        except (OSError, subprocess.TimeoutExpired, ValueError, AttributeError) as exc:
            log.warning("%s failed: %s", tool, exc)
    return []


def discover_local_devices(phones: PhoneSettings | None = None, gpu_lock: str = "") -> list[LocalDevice]:
    """The host's CPU and NVIDIA GPUs; and its phones (one device per CPU cluster) when `phones`
    is given with `enabled` set (a host without adb, or whose adb fails, simply has none).
    `gpu_lock`: agent.gpu_lock_clocks (`parse_nvidia_smi`)."""
    cpu = cpu_device()
    found = ([cpu] if cpu else []) + nvidia_devices(gpu_lock) + amd_devices()
    if phones is not None and phones.enabled:
        try:
            found += phone_devices(phones)
        except AdbError as exc:
            log.warning("phone discovery failed: %s", exc)
    return found


class NoDeviceForTarget(ValueError):
    """A target was asked for that no device of this host runs."""


def plan_targets(devices: Sequence[LocalDevice], only: Sequence[str] | None) -> list[str]:
    """The targets `devices` run, optionally narrowed to `only` (unknown names are an error). Here,
    not beside the run of `benchfarm run`, because `benchfarm build` on a builder host asks it too."""
    available = sorted({t for d in devices for t in d.device_class.targets})
    if not only:
        return available
    for name in only:
        Target.parse(name)
    missing = [t for t in only if t not in available]
    if missing:
        raise NoDeviceForTarget(f"no local device runs target {', '.join(missing)}; this machine has "
                                f"{', '.join(available)}")
    return list(only)


def phone_devices(settings: PhoneSettings, adb: Adb | None = None) -> list[LocalDevice]:
    """LocalDevices for the phones `adb devices -l` lists as ready, one per CPU cluster; phones in
    another state (offline, unauthorized) and ABIs the targets do not run are logged and left out."""
    adb = adb or Adb.from_settings(settings)
    found: list[LocalDevice] = []
    for entry in adb.devices():
        if entry.state != "device":
            log.warning("phone %s is %s; not benchmarked until it is ready", entry.serial, entry.state)
            continue
        try:
            props = parse_getprop(adb.shell(entry.serial, "getprop").stdout)
        except AdbError as exc:
            log.warning("phone %s: getprop failed: %s", entry.serial, exc)
            continue
        model = props.get("ro.product.model") or entry.details.get("model", entry.serial)
        soc = props.get("ro.soc.model") or props.get("ro.board.platform") or "unknown SoC"
        abi = props.get("ro.product.cpu.abi", "")
        if abi not in settings.abis:
            log.warning("phone %s (%s): ABI %r, the phone targets run on %s", entry.serial, model, abi, settings.abis)
            continue
        release, sdk = props.get("ro.build.version.release", "?"), props.get("ro.build.version.sdk", "?")
        for cluster, mask in cpu_clusters(adb, entry.serial, model, settings).items():
            device_class = DeviceClass(
                name=f"{slug(model)}-cpu-{slug(cluster)}", kind="phone", targets=list(settings.targets),
                runtime="iree", hal_driver=PHONE_HAL_DRIVER,
                description=f"{model} ({soc}, {abi}), {cluster} cores (taskset {mask or 'none'}), IREE {PHONE_HAL_DRIVER}",
            )
            info = DeviceInfo(
                device_class=device_class.name, uid=props.get("ro.serialno") or entry.serial,
                name=f"{model} ({soc})", driver=f"android {release} (sdk {sdk})", host=socket.gethostname(),
            )
            found.append(LocalDevice(device_class, info, transport=AdbTransport(entry.serial, mask, settings)))
    return found
