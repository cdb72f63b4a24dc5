"""Run one bundle entry on an Android phone through adb: the phone has no Python, only IREE's tools.

Per entry (docs/design.md, "Measurement", phones): verify the artifact's sha256 on the host, push it
with fresh random inputs (.npy) into a folder of its own on the phone, run it once with
`iree-run-module --output=@...`, pull the results and compare them with the float64 reference on
the host (the check every runner shares, `checking.check_against_reference`). A kernel that passes
is timed by `iree-benchmark-module --benchmark_format=json --benchmark_repetitions=N` under
`taskset MASK` (the device class's cluster); each repetition is one sample (its mean time per
iteration, parsed by the Google Benchmark reader of `pipeline.results.store.formats`).

Before every timed call: a cool-down (every watched thermal zone under `cooldown_max_c`, polled,
up to `cooldown_timeout_s`); around it, when the phone is rooted (`su`, or adbd running as root),
the `performance` governor on every cpufreq policy, each policy's own governor restored afterwards,
also when the call fails. The agent's sampling loop asks for one sample at a time; a timed call
(after a warm-up of one repetition's length) yields `repetitions` samples, handed out one by one
before the next call, across the loop's rounds. The loop's wall-time budget includes adb and the
cool-down, so a round whose call waited may end after one sample: keep `phones.repetitions` at
least `measurement.min_samples` so that the samples come from the phone rather than from adb.
"""

from __future__ import annotations

import json
import logging
import secrets
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.agents.adb import CPUFREQ, Adb, AdbError, AdbTransport
from pipeline.agents.runners import CheckedKernel, Workspace
from pipeline.agents.runners.checking import check_against_reference
from pipeline.agents.runners.iree_runner import make_inputs, verify_artifact
from pipeline.contracts import BundleEntry, CaseResult, Correctness
from pipeline.contracts.foreign import google_benchmark

log = logging.getLogger(__name__)

__all__ = ["TOOLS", "AdbPhone", "parse_temperatures", "prepare_entry"]

RUN_MODULE, BENCHMARK_MODULE = "iree-run-module", "iree-benchmark-module"
TOOLS = (RUN_MODULE, BENCHMARK_MODULE)
THERMAL = "/sys/class/thermal"
PERFORMANCE = "performance"


def parse_temperatures(text: str) -> dict[str, float]:
    """`TYPE MILLIDEGREES` lines -> {zone type: degrees C}; unreadable or absurd readings dropped
    (sensors that report -273 or nothing are common on phones)."""
    temps: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.strip().rpartition(" ")
        try:
            reading = float(value)
        except ValueError:
            continue
        celsius = reading / 1000 if abs(reading) >= 200 else reading   # most zones: millidegrees
        if name and -40 < celsius < 200:
            temps[name] = max(celsius, temps.get(name, celsius))
    return temps


class AdbPhone:
    """One phone for one run: its adb serial, the cluster's mask, the IREE tools pushed once."""

    def __init__(self, transport: AdbTransport, hal_driver: str, *, sleep: Callable[[float], None] = time.sleep):
        self.transport = transport
        self.settings = transport.settings
        self.serial, self.mask, self.hal_driver = transport.serial, transport.cpu_mask, hal_driver
        self.adb = Adb.from_settings(self.settings)
        self.remote_dir = self.settings.remote_dir.rstrip("/")
        self._sleep = sleep
        self._tools_ready = False
        self._rooted: bool | None = None

    def shell(self, command: str, **kwargs: Any) -> str:
        return self.adb.shell(self.serial, command, **kwargs).stdout

    def ensure_tools(self) -> None:
        """Push iree-run-module and iree-benchmark-module (`phones.iree_tools_dir`) once per run."""
        if self._tools_ready:
            return
        tools_dir = Path(self.settings.iree_tools_dir)
        missing = [t for t in TOOLS if not (tools_dir / t).is_file()]
        if missing:
            raise FileNotFoundError(
                f"phones.iree_tools_dir ({tools_dir}) lacks {', '.join(missing)}: it must hold IREE's runtime tools "
                "built for the phone (an Android arm64 build of iree-run-module and iree-benchmark-module)")
        self.shell(f"mkdir -p {shlex.quote(self.remote_dir)}")
        self.adb.push(self.serial, [tools_dir / t for t in TOOLS], self.remote_dir + "/")
        self.shell("chmod 755 " + " ".join(shlex.quote(f"{self.remote_dir}/{t}") for t in TOOLS))
        self._tools_ready = True

    # ---- root and governors --------------------------------------------------------------------

    def rooted(self) -> bool:
        """adbd runs as root (`adb root`), or `su` gives root."""
        if self._rooted is None:
            self._rooted = (self.shell("id -u", check=False).strip() == "0"
                            or self.shell("su 0 id -u 2>/dev/null", check=False).strip() == "0")
        return self._rooted

    def root_shell(self, command: str) -> str:
        if self.shell("id -u", check=False).strip() == "0":
            return self.shell(command)
        return self.shell(f"su 0 sh -c {shlex.quote(command)}")

    def governors(self) -> dict[str, str]:
        """cpufreq policy folder -> its scaling_governor."""
        out = self.shell(f'for p in {CPUFREQ}/policy*; do echo "$p $(cat $p/scaling_governor)"; done', check=False)
        return dict(line.split(" ", 1) for line in out.splitlines() if line.count(" ") == 1 and line.startswith("/"))

    def _set_governors(self, governors: dict[str, str]) -> None:
        self.root_shell("; ".join(f"echo {shlex.quote(g)} > {shlex.quote(p)}/scaling_governor" for p, g in governors.items()))

    @contextmanager
    def performance_governor(self) -> Iterator[str]:
        """`performance` on every policy while inside, each policy's own governor restored after
        (also when the body raises); unrooted phones are left as they are. Yields what was done."""
        if not self.rooted():
            yield "unchanged (not rooted)"
            return
        saved = self.governors()
        self._set_governors({p: PERFORMANCE for p in saved})
        try:
            yield PERFORMANCE
        finally:
            self._set_governors(saved)

    # ---- thermals --------------------------------------------------------------------------------

    def temperatures(self) -> dict[str, float]:
        out = self.shell(f'for z in {THERMAL}/thermal_zone*; do echo "$(cat $z/type) $(cat $z/temp)"; done 2>/dev/null',
                         check=False)
        temps = parse_temperatures(out)
        watched = self.settings.thermal_zones
        return {z: t for z, t in temps.items() if not watched or z in watched}

    def cool_down(self) -> tuple[float, bool]:
        """Wait until every watched zone is under `cooldown_max_c`: (seconds waited, cooled)."""
        start = time.monotonic()
        while True:
            hot = {z: t for z, t in self.temperatures().items() if t >= self.settings.cooldown_max_c}
            waited = time.monotonic() - start
            if not hot:
                return waited, True
            if waited >= self.settings.cooldown_timeout_s:
                log.warning("phone %s still hot after %.0f s (%s); timing anyway", self.serial, waited,
                            ", ".join(f"{z} {t:.1f} C" for z, t in hot.items()))
                return waited, False
            self._sleep(self.settings.cooldown_poll_s)

    # ---- one case --------------------------------------------------------------------------------

    def pinned(self, command: str) -> str:
        return f"taskset {self.mask} {command}" if self.mask else command


class _PhoneCase:
    """One checked entry on the phone: its folder there and the timed calls' samples."""

    def __init__(self, phone: AdbPhone, entry: BundleEntry, case_dir: str, arguments: list[str]):
        self.phone, self.entry, self.case_dir, self.arguments = phone, entry, case_dir, arguments
        self.pending: list[float] = []
        self.environment: dict[str, str] = {
            "cpu_mask": phone.mask or "none", "governor": "", "cooldown_wait_s": "0.0", "cooldown_timeouts": "0",
            "repetitions_per_call": str(phone.settings.repetitions),
        }

    def _module_flags(self) -> str:
        assert self.entry.launch is not None
        return " ".join([
            "--module=module.vmfb", f"--device={self.phone.hal_driver}",
            f"--function={shlex.quote(self.entry.launch.entry_point)}",
            *(f"--input=@{name}.npy" for name in self.arguments),
        ])

    def run_once(self) -> float:
        if not self.pending:
            self.pending = self._timed_call()
        return self.pending.pop(0)

    def _timed_call(self) -> list[float]:
        phone, settings = self.phone, self.phone.settings
        waited, cooled = phone.cool_down()
        self.environment["cooldown_wait_s"] = f"{float(self.environment['cooldown_wait_s']) + waited:.1f}"
        if not cooled:
            self.environment["cooldown_timeouts"] = str(int(self.environment["cooldown_timeouts"]) + 1)
        command = (f"cd {shlex.quote(self.case_dir)} && " + phone.pinned(
            f"../../{BENCHMARK_MODULE} {self._module_flags()} --benchmark_repetitions={settings.repetitions} "
            f"--benchmark_min_time={settings.repetition_min_time_s:g}s "
            f"--benchmark_min_warmup_time={settings.repetition_min_time_s:g} --benchmark_format=json"))
        with phone.performance_governor() as governor:
            self.environment["governor"] = governor
            out = phone.shell(command)
        return _samples(out)

    def release(self) -> None:
        try:
            self.phone.shell(f"rm -rf {shlex.quote(self.case_dir)}", check=False)
        except AdbError as exc:
            log.warning("could not remove %s on %s: %s", self.case_dir, self.phone.serial, exc)


def _samples(output: str) -> list[float]:
    """One sample per repetition from iree-benchmark-module's Google Benchmark JSON."""
    start = output.find("{")
    if start < 0:
        raise AdbError(f"{BENCHMARK_MODULE} printed no JSON: {output[-500:]!r}")
    parsed = google_benchmark.parse(json.loads(output[start:]))
    if len(parsed.benchmarks) != 1:
        raise AdbError(f"{BENCHMARK_MODULE} reported {len(parsed.benchmarks)} benchmarks, expected one")
    benchmark = parsed.benchmarks[0]
    if benchmark.error or benchmark.skipped or not benchmark.samples:
        raise AdbError(f"{BENCHMARK_MODULE}: {benchmark.error or benchmark.skipped or 'no samples'}")
    return list(benchmark.samples)


def prepare_entry(
    *,
    device: AdbPhone,
    bundle_dir: Path,
    entry: BundleEntry,
    reference_fn: Callable[..., Any],
    rng: np.random.Generator,
    placements: int = 1,
    workspace: Workspace | None = None,
    verified: Correctness | None = None,
) -> CheckedKernel | CaseResult:
    """Push and check one built entry on the phone: a CheckedKernel (timed through adb), or a
    `wrong` CaseResult; raises on errors (the caller turns them into status error).

    Of the runners' shared keyword arguments (`pipeline.agents.runners`) only `verified` applies:
    every timed call is a new `iree-benchmark-module` process that allocates its buffers anew, so
    placement already varies call by call, and a paired base pushes the same input values (the
    input seed is the case's, not the commit's)."""
    assert entry.launch is not None and entry.reference is not None and entry.artifact is not None
    phone = device
    verify_artifact(bundle_dir, entry)
    phone.ensure_tools()
    inputs = make_inputs(entry.tensors, rng)
    arguments = list(entry.launch.arguments)
    args = [inputs[name] for name in arguments]
    case_dir = f"{phone.remote_dir}/cases/{entry.artifact.sha256[:16]}-{secrets.token_hex(4)}"
    case = _PhoneCase(phone, entry, case_dir, arguments)
    try:
        with tempfile.TemporaryDirectory(prefix="benchfarm-phone-") as tmp:
            local = Path(tmp)
            module = local / "module.vmfb"
            shutil.copyfile(Path(bundle_dir) / entry.artifact.path, module)
            for name, array in zip(arguments, args):
                np.save(local / f"{name}.npy", array)
            phone.shell(f"mkdir -p {shlex.quote(case_dir)}")
            phone.adb.push(phone.serial, [module, *(local / f"{n}.npy" for n in arguments)], case_dir + "/")
            results = list(entry.launch.results)
            outputs_flags = " ".join(f"--output=@out_{name}.npy" for name in results)
            phone.shell(f"cd {shlex.quote(case_dir)} && " + phone.pinned(
                f"../../{RUN_MODULE} {case._module_flags()} {outputs_flags}"))
            outputs = []
            for name in results:
                phone.adb.pull(phone.serial, f"{case_dir}/out_{name}.npy", local / f"out_{name}.npy")
                outputs.append(np.load(local / f"out_{name}.npy"))
    except BaseException:
        case.release()
        raise
    correctness = verified or check_against_reference(outputs, args, reference_fn, results, entry.reference, rng)
    if not correctness.passed:
        case.release()
        return CaseResult(
            case=entry.case, target=entry.target, status="wrong",
            reason=f"correctness check failed: {correctness.detail}", correctness=correctness,
        )
    return CheckedKernel(entry=entry, correctness=correctness, run_once=case.run_once, release=case.release,
                         environment=case.environment)
