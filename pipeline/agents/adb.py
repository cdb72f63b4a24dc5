"""The real `adb` client, typed: devices, connect, shell, push, pull; a phone's properties and CPU clusters.

Every call is one `adb` subprocess (Debian package `adb`, or the platform-tools one). Errors that
name the device's state become their own exceptions (offline, unauthorized, gone), so the agent can
tell a phone that needs a person (unlock, accept the RSA key) from one that was unplugged.

Discovery (`pipeline.agents.devices.phone_devices`) reads the phones through this client: `adb
devices -l`, one `getprop` per phone, the CPU clusters (`cpu_clusters`); a phone's
`LocalDevice.transport` is `AdbTransport(serial, cpu_mask, ...)`: plain data, so whatever schedules
jobs never needs to know the device is a phone.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.config import PhoneSettings

log = logging.getLogger(__name__)

__all__ = [
    "Adb",
    "AdbDeviceEntry",
    "AdbError",
    "AdbNotFound",
    "AdbTransport",
    "DeviceGone",
    "DeviceOffline",
    "DeviceUnauthorized",
    "ShellResult",
    "cpu_clusters",
    "hex_mask",
    "parse_devices",
    "parse_getprop",
]

CPUFREQ = "/sys/devices/system/cpu/cpufreq"
_STATE_ERRORS = (
    (re.compile(r"unauthorized"), "DeviceUnauthorized"),
    (re.compile(r"device offline|\boffline\b"), "DeviceOffline"),
    (re.compile(r"device '[^']*' not found|no devices/emulators found|device not found|closed|"
                r"failed to connect|cannot connect|Connection refused"), "DeviceGone"),
)


class AdbError(RuntimeError):
    """An adb command failed; the message has the command and adb's own words."""


class AdbNotFound(AdbError):
    """The adb client binary is not installed (Debian: apt-get install adb)."""


class DeviceOffline(AdbError):
    """The phone is listed but offline (adbd not answering; replug or `adb reconnect`)."""


class DeviceUnauthorized(AdbError):
    """The phone has not accepted this host's adb key (unlock it and accept the prompt)."""


class DeviceGone(AdbError):
    """The serial is not (or no longer) connected."""


_ERRORS: dict[str, type[AdbError]] = {
    "DeviceUnauthorized": DeviceUnauthorized, "DeviceOffline": DeviceOffline, "DeviceGone": DeviceGone,
}


@dataclass(frozen=True)
class AdbDeviceEntry:
    """One line of `adb devices -l`: serial, state (device, offline, unauthorized, ...) and the
    key:value details (product, model, device, transport_id)."""

    serial: str
    state: str
    details: dict[str, str] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class ShellResult:
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class AdbTransport:
    """How a phone's device class is reached: adb serial, the CPU cluster's taskset mask, and the
    phone settings the runner uses (adb binary and server, tools, cool-down)."""

    serial: str
    cpu_mask: str
    settings: PhoneSettings = field(default_factory=PhoneSettings, compare=False, hash=False)


def parse_devices(text: str) -> list[AdbDeviceEntry]:
    """Entries of `adb devices -l` output (the header and daemon messages are skipped)."""
    entries = []
    for line in text.splitlines():
        if not line.strip() or line.startswith(("List of devices", "*")):
            continue
        parts = line.split()
        if len(parts) < 2:
            continue
        details = dict(p.split(":", 1) for p in parts[2:] if ":" in p)
        entries.append(AdbDeviceEntry(serial=parts[0], state=parts[1], details=details))
    return entries


_GETPROP_LINE = re.compile(r"^\[(?P<key>[^\]]+)\]: \[(?P<value>.*)\]$")


def parse_getprop(text: str) -> dict[str, str]:
    """`getprop` (no arguments) output, `[key]: [value]` per line, as a dict."""
    return {m["key"]: m["value"] for m in map(_GETPROP_LINE.match, text.splitlines()) if m}


def hex_mask(cpus: Sequence[int]) -> str:
    """taskset's hex mask of CPU numbers: [4, 5, 6, 7] -> `f0`."""
    return format(sum(1 << c for c in set(cpus)), "x")


def _cpu_list(text: str) -> list[int]:
    """CPUs from sysfs lists: `4 5 6 7` (related_cpus) or `0-3,8` (possible)."""
    cpus: list[int] = []
    for part in re.split(r"[\s,]+", text.strip()):
        if "-" in part:
            low, high = part.split("-", 1)
            cpus.extend(range(int(low), int(high) + 1))
        elif part.isdigit():
            cpus.append(int(part))
    return cpus


_PHONES = PhoneSettings()   # the client's defaults are the settings'


class Adb:
    """The adb client: `adb [-s SERIAL] ...` with a timeout, an optional private server socket
    (ADB_SERVER_SOCKET) and errors that say what state the device is in."""

    def __init__(self, binary: str = _PHONES.adb, *, server_socket: str = _PHONES.adb_server_socket,
                 timeout_s: float = _PHONES.adb_timeout_s):
        self.binary = binary
        self.server_socket = server_socket
        self.timeout_s = timeout_s

    @classmethod
    def from_settings(cls, settings: PhoneSettings) -> Adb:
        return cls(settings.adb, server_socket=settings.adb_server_socket, timeout_s=settings.adb_timeout_s)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.server_socket:
            env["ADB_SERVER_SOCKET"] = self.server_socket
        return env

    def run(self, args: Sequence[str], *, serial: str | None = None, timeout_s: float | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        binary = shutil.which(self.binary)
        if binary is None:
            raise AdbNotFound(f"adb client {self.binary!r} not found; install it (Debian: apt-get install adb)")
        command = [binary, *(["-s", serial] if serial else []), *args]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, env=self._env(),
                                  timeout=timeout_s or self.timeout_s, stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            raise AdbError(f"`adb {' '.join(args)[:200]}` timed out after {timeout_s or self.timeout_s:.0f} s") from None
        if check and proc.returncode != 0:
            raise self._error(args, serial, proc.returncode, proc.stderr or proc.stdout)
        return proc

    @staticmethod
    def _error(args: Sequence[str], serial: str | None, code: int, text: str) -> AdbError:
        where = f" on {serial}" if serial else ""
        message = f"`adb {' '.join(args)[:200]}`{where} failed (exit {code}): {text.strip()[-2000:]}"
        for pattern, name in _STATE_ERRORS:
            if pattern.search(text):
                return _ERRORS[name](message)
        return AdbError(message)

    def devices(self) -> list[AdbDeviceEntry]:
        return parse_devices(self.run(["devices", "-l"]).stdout)

    def connect(self, address: str) -> None:
        """`adb connect HOST:PORT` (adb exits 0 even when it fails: its output says)."""
        out = self.run(["connect", address]).stdout.strip()
        if not out.startswith(("connected to", "already connected to")):
            raise DeviceGone(f"adb connect {address}: {out}")

    def disconnect(self, address: str) -> None:
        self.run(["disconnect", address], check=False)

    def kill_server(self) -> None:
        self.run(["kill-server"], check=False, timeout_s=10)

    def state(self, serial: str) -> str:
        """The serial's state in `adb devices -l`; raises DeviceGone when it is not listed."""
        for entry in self.devices():
            if entry.serial == serial:
                return entry.state
        raise DeviceGone(f"{serial} is not among the devices adb lists")

    def shell(self, serial: str, command: str, *, timeout_s: float | None = None, check: bool = True) -> ShellResult:
        """Run `command` with the phone's `sh -c`; the exit status is the command's (shell protocol v2).

        With check, a non-zero exit raises AdbError (or the state error adb's words name)."""
        proc = self.run(["shell", command], serial=serial, timeout_s=timeout_s, check=False)
        result = ShellResult(proc.returncode, proc.stdout, proc.stderr)
        if check and proc.returncode != 0:
            if proc.stderr.startswith(("adb: ", "error: ")):
                raise self._error(["shell", command], serial, proc.returncode, proc.stderr)
            raise AdbError(f"`{command[:300]}` on {serial} exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
        return result

    def push(self, serial: str, local: Sequence[Path], remote: str) -> None:
        """`adb push LOCAL... REMOTE` (REMOTE a folder when several files go)."""
        self.run(["push", *map(str, local), remote], serial=serial)

    def pull(self, serial: str, remote: str, local: Path) -> None:
        self.run(["pull", remote, str(local)], serial=serial)


def cpu_clusters(adb: Adb, serial: str, model: str, settings: PhoneSettings) -> dict[str, str]:
    """{cluster: mask}: the settings' mapping for the model, or the fastest cpufreq policy as `big`."""
    if model in settings.clusters:
        return dict(settings.clusters[model])
    out = adb.shell(serial, f'for p in {CPUFREQ}/policy*; do echo "$(cat $p/cpuinfo_max_freq) $(cat $p/related_cpus)"; done',
                    check=False).stdout
    best: tuple[int, list[int]] | None = None
    for line in out.splitlines():
        freq, _, cpus = line.strip().partition(" ")
        if freq.isdigit() and _cpu_list(cpus) and (best is None or int(freq) > best[0]):
            best = (int(freq), _cpu_list(cpus))
    if best is None:
        log.warning("phone %s (%s): no cpufreq policies readable; its class runs unpinned on all CPUs", serial, model)
        return {"all": ""}
    return {"big": hex_mask(best[1])}
