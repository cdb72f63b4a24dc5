"""Hardware counters of each checked binary on this host (`pipeline.contracts.counters`): taken once
per (binary's code, device class), outside the timed rounds, on the check's inputs, without changing clocks,
and kept like the check's outcome (`CounterCache`).

Profilers:
- NVIDIA (`runtime == "cuda"`): Nsight Compute. `ncu --clock-control none` watches one launch of the
  cubin in a process of its own (`pipeline.agents.runners.cuda_launch`, inputs drawn from the check's
  seed) and prints the metrics as CSV (`parse_ncu_csv`): warp instructions executed, DRAM bytes read
  and written, L2 sector hit rate, achieved occupancy. ncu's default cache control flushes the caches
  before the launch, so the bytes are a cold launch's. On an H200, ncu read the same instruction count
  and DRAM bytes of one kernel in two processes (docs/design.md, "Measurement").
- CPUs (IREE's `local-sync` driver, which runs a call on the calling thread): the kernel's perf events
  (`perf_event_open`, what `perf stat` reads), user-space instructions of this thread over one call of
  the checked kernel, the least of three (the Python around the call adds a few instructions now and
  then, never takes any away). Needs `/proc/sys/kernel/perf_event_paranoid` <= 2 (or CAP_PERFMON) and a
  PMU the kernel exposes (a VM may have none).
- Phones (simpleperf over adb), AMD GPUs (rocprofv3), vendor controls (the host's library, several
  kernels per call): not taken, and the result says so.

Every result of a checked case says in its environment (`pipeline.contracts.counters.COUNTERS_KEY`) what was taken and how, or
why nothing was: the setting is off, the profiler is missing, the kernel refused it, it failed.
"""

from __future__ import annotations

import csv
import ctypes
import errno
import fcntl
import glob
import hashlib
import io
import json
import logging
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pipeline
from pipeline.agents.adb import AdbTransport
from pipeline.agents.check_cache import KeptFiles
from pipeline.agents.devices import LocalDevice
from pipeline.agents.runners import CheckedKernel
from pipeline.config import MeasurementSettings
from pipeline.contracts import BundleEntry
from pipeline.contracts.counters import CounterName, HardwareCounters

log = logging.getLogger(__name__)

__all__ = ["COUNTER_POLICY", "NCU_METRICS", "TASK_CLOCK", "CounterCache", "CounterCollector", "CountersUnavailable",
           "NcuProfiler", "PerfEventProfiler", "find_ncu", "parse_ncu_csv", "profiler_for"]

COUNTER_POLICY = "counters-v1"
"""Bump when what is counted or how changes: counters kept under another policy are taken again."""

NCU_METRICS: dict[str, CounterName] = {
    "smsp__inst_executed.sum": "instructions",
    "dram__bytes_read.sum": "dram_read_bytes",
    "dram__bytes_write.sum": "dram_write_bytes",
    "lts__t_sector_hit_rate.pct": "l2_hit_rate",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy",
}
"""Nsight Compute metric (Hopper and later names) -> our counter."""
NCU_PLACES = ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")
"""Where ncu is looked for when it is not on PATH."""
CPU_REPEATS = 3


class CountersUnavailable(RuntimeError):
    """No counters for this binary here; the message is what the result's environment says."""


@dataclass(frozen=True)
class CounterRequest:
    """One binary to take counters of: its bundle entry, the seed its check's inputs were drawn from,
    and its checked kernel (which a profiler in this process calls; ncu launches it in a process of its own)."""

    bundle_dir: Path
    entry: BundleEntry
    seed: int
    kernel: CheckedKernel | None = None


# ---- Nsight Compute ---------------------------------------------------------------------------------

def _number(text: str) -> float:
    """A value as ncu prints it with `--print-units base` (thousands separated by commas: "50,360,320")."""
    return float(text.replace(",", "").strip())


@dataclass(frozen=True)
class NcuLaunch:
    """One profiled launch of ncu's CSV: its kernel's name and our counters."""

    kernel: str
    values: dict[CounterName, float]


def parse_ncu_csv(text: str) -> list[NcuLaunch]:
    """Our counters from the output of `ncu --csv --metrics ...`, one per profiled launch in launch
    order: the CSV rows (one per launch and metric: "ID", ..., "Kernel Name", ..., "Metric Name",
    "Metric Unit", "Metric Value") among ncu's `==PROF==` lines and whatever the application printed.
    Raises ValueError naming what is wrong: no CSV, a metric missing or not a number."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",') and '"Metric Name"' in line), None)
    if start is None:
        raise ValueError("no ncu CSV header (\"ID\",...,\"Metric Name\",...) in the profiler's output")
    rows = csv.DictReader(io.StringIO("\n".join(line for line in lines[start:] if line.startswith('"'))))
    launches: dict[int, tuple[str, dict[CounterName, float]]] = {}
    for row in rows:
        try:
            launch = int(row["ID"])
        except (TypeError, ValueError):
            raise ValueError(f"ncu CSV row with ID {row.get('ID')!r}") from None
        kernel, values = launches.setdefault(launch, (row.get("Kernel Name") or "", {}))
        counter = NCU_METRICS.get(row.get("Metric Name") or "")
        if counter is None:
            continue
        try:
            values[counter] = _number(row.get("Metric Value") or "")
        except ValueError:
            raise ValueError(f"ncu metric {row['Metric Name']} of launch {launch} is {row.get('Metric Value')!r}, "
                             "not a number") from None
    out = []
    for launch in sorted(launches):
        kernel, values = launches[launch]
        missing = [m for m, c in NCU_METRICS.items() if c not in values]
        if missing:
            raise ValueError(f"ncu did not report {', '.join(missing)} of launch {launch} ({kernel})")
        out.append(NcuLaunch(kernel, values))
    return out


def find_ncu() -> str | None:
    """ncu on PATH, else in the CUDA toolkit's or Nsight Compute's usual places."""
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in NCU_PLACES:
        for path in sorted(glob.glob(pattern), reverse=True):   # the newest version first
            if os.access(path, os.X_OK):
                return path
    return None


def _ncu_refusal(output: str) -> str | None:
    """The reason in ncu's output when the driver would not let it read the counters."""
    if "ERR_NVGPUCTRPERM" in output:
        return ("refused: the driver lets only administrators read GPU performance counters (ERR_NVGPUCTRPERM; "
                "NVreg_RestrictProfilingToAdminUsers=0 or run the agent with CAP_SYS_ADMIN)")
    return None


@dataclass
class NcuProfiler:
    """Nsight Compute over one launch in a child process (module doc)."""

    ncu: str
    version: str
    device_uid: str | None
    timeout_s: float

    @classmethod
    def find(cls, device_uid: str | None, timeout_s: float) -> NcuProfiler:
        ncu = find_ncu()
        if ncu is None:
            raise CountersUnavailable("not available: ncu (Nsight Compute) not found on PATH or in "
                                      + ", ".join(NCU_PLACES))
        try:
            shown = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CountersUnavailable(f"not available: {ncu} --version failed: {exc}") from None
        found = re.search(r"Version\s+(\S+)", shown.stdout)
        if shown.returncode != 0 or found is None:
            raise CountersUnavailable(f"not available: {ncu} --version said {(shown.stdout + shown.stderr)[-300:]!r}")
        return cls(ncu=ncu, version=found.group(1), device_uid=device_uid, timeout_s=timeout_s)

    @property
    def name(self) -> str:
        return f"ncu {self.version}"

    def command(self, plan: Path, launched: Path, kernels: Sequence[str]) -> list[str]:
        """ncu over the launch process, profiling the `kernels` (entry points) alone: the inputs are made
        on the GPU by torch kernels of their own, which are left out."""
        launch = [sys.executable, "-m", "pipeline.agents.runners.cuda_launch", "--plan", str(plan),
                  "--launched", str(launched), *(["--device", self.device_uid] if self.device_uid else [])]
        names = "|".join(re.escape(k) for k in sorted(set(kernels)))
        return [self.ncu, "--clock-control", "none", "--metrics", ",".join(NCU_METRICS), "--csv",
                "--print-units", "base", "--kernel-name", f"regex:^({names})$", *launch]

    def collect_many(self, requests: Sequence[CounterRequest]) -> list[HardwareCounters | CountersUnavailable]:
        """The counters of each request, in order: one ncu process launching every kernel once, in turn
        (`pipeline.agents.runners.cuda_launch`), so that ncu starts once per group of binaries."""
        out: list[HardwareCounters | CountersUnavailable] = [
            CountersUnavailable("not available: a vendor control runs the host's library (several kernels a call); "
                                "counters are taken of the bundle's own binaries")] * len(requests)
        launches = {i: r.entry.launch for i, r in enumerate(requests)
                    if r.entry.launch is not None and r.entry.launch.torch is None}
        wanted = list(launches)
        if not wanted:
            return out
        env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONPATH": os.pathsep.join(
            p for p in (str(Path(pipeline.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")) if p)}
        with tempfile.TemporaryDirectory(prefix="benchfarm-ncu-") as work:
            plan, launched_file = Path(work) / "plan.json", Path(work) / "launched.json"
            plan.write_text(json.dumps([{"bundle": str(requests[i].bundle_dir), "case": str(requests[i].entry.case),
                                         "target": requests[i].entry.target, "seed": requests[i].seed}
                                        for i in wanted]))
            timeout = self.timeout_s * len(wanted)
            try:
                kernels = [launches[i].entry_point for i in wanted]
                done = subprocess.run(self.command(plan, launched_file, kernels), capture_output=True, text=True,
                                      timeout=timeout, env=env, check=False)
            except subprocess.TimeoutExpired:
                failed = CountersUnavailable(f"failed: ncu took longer than {timeout:g} s for {len(wanted)} "
                                             "binaries (measurement setting counters_timeout_s, per binary)")
                return [failed if i in wanted else o for i, o in enumerate(out)]
            output = done.stdout + "\n" + done.stderr
            tail = " | ".join(output.strip().splitlines()[-4:])[-600:]
            try:
                launched: dict[str, str] = json.loads(launched_file.read_text())
            except (OSError, ValueError):
                launched = {}
        refusal = _ncu_refusal(output)
        try:
            profiled = parse_ncu_csv(done.stdout) if refusal is None else []
            problem = refusal
        except ValueError as exc:
            profiled, problem = [], f"failed: {exc} (ncu exit {done.returncode}: {tail})"
        # launch k of ncu's CSV is the k-th request the child launched ("ok"); the others say why not
        made = iter(profiled)
        for position, index in enumerate(wanted):
            status = launched.get(str(position))
            if status is not None and status != "ok":   # this binary could not be launched: its own reason
                out[index] = CountersUnavailable(f"failed: {status}"[:500])
            elif problem is not None:
                out[index] = CountersUnavailable(problem)
            elif status is None:
                out[index] = CountersUnavailable(f"failed: the launch process stopped before this binary "
                                                 f"(exit {done.returncode}: {tail})")
            else:
                found = next(made, None)
                entry_point = launches[index].entry_point
                if found is None or entry_point not in found.kernel:   # ncu may show "name(args)" or templates
                    out[index] = CountersUnavailable(
                        f"failed: ncu's launches do not match the binaries launched (expected {entry_point}, "
                        f"found {found.kernel if found else 'none'})")
                    made = iter(())   # every later one would be misattributed
                else:
                    out[index] = HardwareCounters(profiler=self.name, values=found.values)
        return out


# ---- CPU perf events ------------------------------------------------------------------------------

_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241, "arm64": 241}
_PERF_TYPE_HARDWARE, _PERF_COUNT_HW_INSTRUCTIONS = 0, 1
TASK_CLOCK = (1, 1)
"""PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK (ns): a counter every Linux kernel has, PMU or not."""
_DISABLED, _EXCLUDE_KERNEL, _EXCLUDE_HV = 1 << 0, 1 << 5, 1 << 6
_READ_TIMES = 1 | 2   # PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING
_IOC_ENABLE, _IOC_DISABLE, _IOC_RESET = 0x2400, 0x2401, 0x2403
_FD_CLOEXEC = 8
_PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")


class _PerfEventAttr(ctypes.Structure):
    """struct perf_event_attr, its first version (PERF_ATTR_SIZE_VER0: 64 bytes): all that is set here."""

    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64), ("wakeup_events", ctypes.c_uint32),
                ("bp_type", ctypes.c_uint32), ("config1", ctypes.c_uint64)]


def _paranoid() -> str:
    try:
        return _PARANOID.read_text().strip()
    except OSError:
        return "unreadable"


@dataclass
class PerfEventProfiler:
    """User-space instructions of the calling thread through perf_event_open (module doc)."""

    fd: int
    kernel_release: str = field(default_factory=platform.release)

    @classmethod
    def open(cls, event: tuple[int, int] = (_PERF_TYPE_HARDWARE, _PERF_COUNT_HW_INSTRUCTIONS)) -> PerfEventProfiler:
        """A disabled counter of `event` (perf type, config: instructions by default) on this thread."""
        number = _PERF_EVENT_OPEN.get(platform.machine())
        if sys.platform != "linux" or number is None:
            raise CountersUnavailable(f"not available: perf events are read on Linux x86_64 and aarch64 only "
                                      f"(this is {sys.platform} {platform.machine()})")
        attr = _PerfEventAttr(type=event[0], size=ctypes.sizeof(_PerfEventAttr), config=event[1], read_format=_READ_TIMES,
                              flags=_DISABLED | _EXCLUDE_KERNEL | _EXCLUDE_HV)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        # syscall(2) is variadic: every argument passed at its full register width
        fd = libc.syscall(ctypes.c_long(number), ctypes.byref(attr), ctypes.c_long(0), ctypes.c_long(-1),
                          ctypes.c_long(-1), ctypes.c_ulong(_FD_CLOEXEC))
        if fd < 0:
            code = ctypes.get_errno()
            name = errno.errorcode.get(code, str(code))
            if code in (errno.EACCES, errno.EPERM):
                raise CountersUnavailable(
                    f"refused: perf_event_open: {name} (kernel.perf_event_paranoid={_paranoid()}; user-space "
                    "counting needs <= 2, or CAP_PERFMON; a container's seccomp profile may refuse it too)")
            if code in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
                raise CountersUnavailable(f"not available: perf_event_open: {name}: this CPU's kernel exposes no "
                                          "instruction counter (a virtual machine without a virtual PMU?)")
            raise CountersUnavailable(f"failed: perf_event_open: {name} ({os.strerror(code)})")
        return cls(fd=fd)

    @property
    def name(self) -> str:
        return f"perf_event_open (Linux {self.kernel_release}, user-space instructions)"

    def count(self, call: Callable[[], object]) -> int:
        """User-space instructions this thread executed during `call()`."""
        fcntl.ioctl(self.fd, _IOC_RESET, 0)
        fcntl.ioctl(self.fd, _IOC_ENABLE, 0)
        try:
            call()
        finally:
            fcntl.ioctl(self.fd, _IOC_DISABLE, 0)
        value, enabled, running = struct.unpack("=QQQ", os.read(self.fd, 24))
        if running < enabled:
            raise CountersUnavailable(f"failed: the instruction counter ran {running} of {enabled} ns of the call "
                                      "(multiplexed with other perf users): its count is an estimate")
        return int(value)

    def collect_many(self, requests: Sequence[CounterRequest]) -> list[HardwareCounters | CountersUnavailable]:
        """The counters of each request's checked kernel, called here on the copy its check ran on."""
        out: list[HardwareCounters | CountersUnavailable] = []
        for request in requests:
            kernel = request.kernel
            if kernel is None:
                out.append(CountersUnavailable("failed: no checked kernel to count"))
                continue
            kernel.select(0)   # the copy the check ran on: the check's inputs
            try:
                counts = [self.count(kernel.run_once) for _ in range(CPU_REPEATS)]
            except CountersUnavailable as exc:
                out.append(exc)
                continue
            out.append(HardwareCounters(profiler=self.name, values={"instructions": float(min(counts))}))
        return out

    def close(self) -> None:
        os.close(self.fd)


Profiler = NcuProfiler | PerfEventProfiler


def profiler_for(device: LocalDevice, settings: MeasurementSettings) -> Profiler:
    """The profiler of this device (module doc); raises CountersUnavailable with the reason there is none."""
    device_class = device.device_class
    if settings.counters == "off":
        raise CountersUnavailable("off (measurement setting counters)")
    if isinstance(device.transport, AdbTransport):
        raise CountersUnavailable("not available: phones are not profiled yet (simpleperf over adb)")
    if device_class.runtime == "cuda":
        return NcuProfiler.find(device.info.uid, settings.counters_timeout_s)
    if device_class.runtime == "iree" and device_class.hal_driver == "local-sync":
        return PerfEventProfiler.open()
    raise CountersUnavailable(f"not available: no profiler for {device_class.runtime} ({device_class.hal_driver}) "
                              "devices yet (AMD: rocprofv3)")


# ---- kept across jobs ---------------------------------------------------------------------------

class CounterCache:
    """Counters already taken on this host, by code and device class (`check_cache.CheckCache`'s way: a
    changed `COUNTER_POLICY` empties it). Counters of a binary do not depend on the run, nor on its names:
    the key is the entry's code digest (`BundleEntry.code_digest`: the same instructions, registers,
    launch and inputs, names aside), so a renamed kernel is not profiled again; its binary digest where
    there is no listing."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._files = KeptFiles(self.folder)

    @staticmethod
    def key(entry: BundleEntry, device_class: str) -> str | None:
        code = entry.code_digest()
        identity = ["code", code] if code is not None else ["binary", entry.binary_digest()]
        if identity[1] is None:
            return None
        return hashlib.sha256(json.dumps([COUNTER_POLICY, device_class, *identity]).encode()).hexdigest()

    def get(self, entry: BundleEntry, device_class: str) -> HardwareCounters | None:
        key = self.key(entry, device_class)
        return self._files.read(key, HardwareCounters) if key is not None else None

    def put(self, entry: BundleEntry, device_class: str, counters: HardwareCounters) -> None:
        key = self.key(entry, device_class)
        if key is not None:
            self._files.write(key, counters)


@dataclass
class CounterCollector:
    """One job's counters: the device's profiler found once (or why there is none), and the cache."""

    device: LocalDevice
    settings: MeasurementSettings
    cache: CounterCache | None = None
    taken: int = 0
    reused: int = 0
    seconds: float = 0.0
    """spent taking counters (profiler start-up included; kept ones cost nothing)"""
    _profiler: Profiler | None = None
    _missing: str | None = None
    _looked: bool = False

    def _find(self) -> Profiler:
        if not self._looked:
            self._looked = True
            try:
                self._profiler = profiler_for(self.device, self.settings)
            except CountersUnavailable as exc:
                self._missing = str(exc)
                log.info("%s: no hardware counters: %s", self.device.device_class.name, exc)
        if self._profiler is None:
            raise CountersUnavailable(self._missing or "not available")
        return self._profiler

    def collect(self, requests: Sequence[CounterRequest]) -> list[tuple[HardwareCounters | None, str]]:
        """The counters of each request's binary (kept ones, else taken now, all of a call's at once) and
        what its result's environment says of them (`pipeline.contracts.counters.COUNTERS_KEY`): how they
        were taken, or why there are none."""
        device_class = self.device.device_class.name
        if self.settings.counters == "off":
            return [(None, "off (measurement setting counters)")] * len(requests)
        out: list[tuple[HardwareCounters | None, str]] = [(None, "")] * len(requests)
        # requests of one code (a paired base of the head's binary, a rename) are profiled once
        missing: dict[str | int, list[int]] = {}
        for i, request in enumerate(requests):
            kept = self.cache.get(request.entry, device_class) if self.cache is not None else None
            if kept is not None:
                self.reused += 1
                out[i] = (kept, f"{kept.profiler}: kept from an earlier job on this host (counter cache)")
            else:
                missing.setdefault(CounterCache.key(request.entry, device_class) or i, []).append(i)
        if not missing:
            return out
        started = time.monotonic()
        try:
            taken = self._find().collect_many([requests[same[0]] for same in missing.values()])
        except CountersUnavailable as exc:
            taken = [exc] * len(missing)
        except Exception as exc:  # a profiler's failure is the results' note; the job goes on
            log.warning("counters failed: %s", exc)
            taken = [CountersUnavailable(f"failed: {type(exc).__name__}: {exc}"[:500])] * len(missing)
        finally:
            self.seconds += time.monotonic() - started
        for same, got in zip(missing.values(), taken, strict=True):
            if isinstance(got, CountersUnavailable):
                for i in same:
                    out[i] = (None, str(got))
                continue
            self.taken += 1
            if self.cache is not None:
                self.cache.put(requests[same[0]].entry, device_class, got)
            for i in same:
                out[i] = (got, f"{got.profiler}: one launch on the check's inputs, clocks unchanged")
        return out

    def close(self) -> None:
        if isinstance(self._profiler, PerfEventProfiler):
            self._profiler.close()

