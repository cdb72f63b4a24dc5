"""`benchfarm doctor`: is this host ready to join the farm? Each check says what it found and, when
it fails, what to do. Failing checks make the command exit 1; warnings (a phone's governor that is
not `performance`, a hot device) are printed but do not.

Checks: the service answers at the agent's URL; the token is known there and holds the agent
scope (no token is only a warning while no agent.server_url names a service to join: one machine's
`benchfarm up` needs none); the agent's work folder has room for bundles; the host lock between compiles and CPU timing
can be opened (and who holds it now); hardware counters (the CPU's perf events, and ncu where nvidia-smi
exists: a warning where they cannot be taken, since results then carry none); NVIDIA GPUs (driver, NVML,
clocks) where nvidia-smi exists; phones over adb (state, CPU governor, temperature) where adb exists.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pipeline.agents.client import ServiceClient, ServiceError
from pipeline.config import Settings

__all__ = ["Check", "run_checks"]

Outcome = Literal["ok", "warn", "fail", "skip"]


@dataclass(frozen=True)
class Check:
    name: str
    outcome: Outcome
    detail: str
    fix: str = ""


def _service(settings: Settings) -> list[Check]:
    url = settings.agent.server_url or settings.public_url
    token = settings.agent.token.get_secret_value()
    client = ServiceClient(url, token, timeout_s=10, retries=0)
    try:
        health = client.request("GET", "health").json()
    except ServiceError as exc:
        return [Check("service", "fail", f"{url}: {exc}", "start the service, or set BENCHFARM_AGENT__SERVER_URL "
                                                            "(agent.server_url) to its address")]
    checks = [Check("service", "ok", f"{url}: benchfarm {health.get('version')} on {health.get('database')}")]
    if not token:
        fix = ("create one on the service (`benchfarm token create --name HOST --scope agent`) and set "
               "BENCHFARM_AGENT__TOKEN")
        if not settings.agent.server_url:
            # No agent is pointed at a service: one machine (`benchfarm run`, or `benchfarm up`, whose
            # in-process agent makes its own token) needs none; only a host that joins a farm does.
            return checks + [Check("token", "warn", "none configured: fine on one machine (`benchfarm up` gives its "
                                   "agent its own); an agent host of a farm needs one", fix)]
        return checks + [Check("token", "fail", "no token configured", fix)]
    try:
        me = client.request("GET", "whoami").json()
    except ServiceError as exc:
        return checks + [Check("token", "fail", f"refused by the service: {exc}",
                               "the token is unknown or revoked: create a new one with the agent scope")]
    scopes = me.get("scopes", [])
    if "agent" in scopes or "admin" in scopes:
        return checks + [Check("token", "ok", f"{me.get('name')!r} with scopes {', '.join(scopes)}")]
    return checks + [Check("token", "fail", f"{me.get('name')!r} holds {', '.join(scopes) or 'no scope'}, not agent",
                           "create a token with `--scope agent`")]


def _disk(settings: Settings, min_free_gb: float) -> Check:
    folder = settings.agent_dir
    probe = folder if folder.exists() else next((p for p in folder.parents if p.exists()), Path("/"))
    free_gb = shutil.disk_usage(probe).free / 1e9
    if free_gb < min_free_gb:
        return Check("disk", "fail", f"{free_gb:.1f} GB free under {folder} (bundles and spool need {min_free_gb:g})",
                     "free space there, or point agent.work_dir (BENCHFARM_AGENT__WORK_DIR) at a larger disk")
    return Check("disk", "ok", f"{free_gb:.1f} GB free under {folder}")


def _host_lock(settings: Settings) -> Check:
    from pipeline.host_lock import HostLockError, holders, open_check

    path = settings.measurement.host_lock
    if not path:
        return Check("host lock", "warn", "none (measurement.host_lock is ''): compiles may run beside CPU timing",
                     "set BENCHFARM_MEASUREMENT__HOST_LOCK to a file every benchfarm process on this host opens")
    try:
        open_check(path)
    except HostLockError as exc:
        return Check("host lock", "fail", str(exc), "point it at a file this user can open (or remove the other "
                                                    "user's file when no benchfarm process runs)")
    held = holders(path)
    return Check("host lock", "ok", f"{path}: " + (f"held by {', '.join(str(h) for h in held)}" if held else "free"))


def _run(args: list[str], timeout_s: float = 20) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _nvidia() -> list[Check]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return [Check("nvidia", "skip", "nvidia-smi not found: no NVIDIA GPU checks")]
    proc = _run([smi, "--query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu",
                 "--format=csv,noheader"])
    if proc is None or proc.returncode != 0:
        return [Check("nvidia", "fail", f"nvidia-smi failed: {(proc.stderr if proc else 'timeout').strip()[-200:]}",
                      "check the driver (nvidia-smi must list the GPUs)")]
    checks = []
    for line in filter(None, proc.stdout.splitlines()):
        index, name, driver, sm, max_sm, temp = (part.strip() for part in line.split(","))
        checks.append(Check(f"gpu {index}", "ok", f"{name}, driver {driver}, SM clock {sm} of {max_sm}, {temp} C"))
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        checks.append(Check("nvml", "ok", "NVML answers (clock and throttle readings during timing)"))
    except Exception as exc:   # ImportError, or NVMLError of any kind
        checks.append(Check("nvml", "fail", f"NVML unavailable: {type(exc).__name__}: {exc}",
                            "pip install 'benchfarm[cuda]' (nvidia-ml-py) and check the driver"))
    return checks


def _phones(max_temp_c: float) -> list[Check]:
    adb = shutil.which("adb")
    if adb is None:
        return [Check("adb", "skip", "adb not found: no phone checks")]
    proc = _run([adb, "devices"])
    if proc is None or proc.returncode != 0:
        return [Check("adb", "fail", "`adb devices` failed", "start the adb server (adb start-server)")]
    rows = [line.split("\t") for line in proc.stdout.splitlines()[1:] if "\t" in line]
    if not rows:
        return [Check("adb", "ok", "adb works; no phone attached")]
    checks = []
    for serial, state in rows:
        if state != "device":
            checks.append(Check(f"phone {serial}", "fail", f"state {state}",
                                "unlock the phone and accept this host's USB debugging key" if state == "unauthorized"
                                else "reconnect the phone"))
            continue
        governor = _run([adb, "-s", serial, "shell", "cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"])
        temp = _run([adb, "-s", serial, "shell", "cat /sys/class/thermal/thermal_zone0/temp"])
        gov = governor.stdout.strip() if governor and governor.returncode == 0 else "unknown"
        try:
            celsius = float(temp.stdout.strip()) / 1000 if temp and temp.returncode == 0 else None
        except ValueError:
            celsius = None
        detail = f"governor {gov}, " + (f"{celsius:.0f} C" if celsius is not None else "temperature unknown")
        if celsius is not None and celsius > max_temp_c:
            checks.append(Check(f"phone {serial}", "warn", detail, f"let it cool below {max_temp_c:g} C before timing"))
        elif gov not in ("performance", "unknown"):
            checks.append(Check(f"phone {serial}", "warn", detail,
                                "timings vary with a dynamic governor: set performance where the phone allows"))
        else:
            checks.append(Check(f"phone {serial}", "ok", detail))
    return checks


def _counters(settings: Settings) -> list[Check]:
    """Whether this host's results will carry hardware counters (`pipeline.agents.counters`)."""
    from pipeline.agents.counters import CountersUnavailable, NcuProfiler, PerfEventProfiler

    if settings.measurement.counters == "off":
        return [Check("counters", "skip", "off (measurement.counters)")]
    fix = "results will say why they carry no counters; set BENCHFARM_MEASUREMENT__COUNTERS=off to say it once"
    checks = []
    probes: list[tuple[str, Callable[[], NcuProfiler | PerfEventProfiler]]] = [("cpu", PerfEventProfiler.open)]
    if shutil.which("nvidia-smi"):
        probes.append(("nvidia", lambda: NcuProfiler.find(None, settings.measurement.counters_timeout_s)))
    for name, probe in probes:
        try:
            found = probe()
        except CountersUnavailable as exc:
            checks.append(Check(f"counters ({name})", "warn", str(exc), fix))
            continue
        if isinstance(found, PerfEventProfiler):
            found.close()
        checks.append(Check(f"counters ({name})", "ok", found.name))
    return checks


def run_checks(settings: Settings, *, min_free_gb: float = 5.0, max_phone_temp_c: float = 45.0) -> list[Check]:
    """Every check of the module doc, in order."""
    return [*_service(settings), _disk(settings, min_free_gb), _host_lock(settings), *_counters(settings),
            *_nvidia(), *_phones(max_phone_temp_c)]
