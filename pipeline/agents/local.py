"""Run a bundle on a device of this host and produce the job's ResultDocument."""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import platform
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.agents.adb import AdbTransport
from pipeline.agents.check_cache import CheckCache
from pipeline.agents.counters import CounterCache, CounterCollector, CounterRequest
from pipeline.agents.devices import LocalDevice
from pipeline.agents.measure import Measured, for_device, measure, measure_pairs, per_round
from pipeline.agents.placement import job_budget, plan_placements, timing_groups
from pipeline.agents.runners import CheckedKernel, Workspace
from pipeline.agents.runners.iree_runner import IreeDevice, prepare_entry
from pipeline.config import MeasurementSettings
from pipeline.contracts import (
    BundleEntry,
    BundleManifest,
    CaseResult,
    Correctness,
    DeviceClass,
    ResultDocument,
    bundle_digest,
)
from pipeline.contracts.bundle_dir import load_bundle, load_suite_module
from pipeline.contracts.counters import COUNTERS_KEY, HardwareCounters
from pipeline.contracts.result import AgentInfo, PairedBase, summarize
from pipeline.contracts.rounds import DecisionRule, RoundChange, level_halfwidth, paired_changes
from pipeline.host_lock import cpu_timing
from pipeline.progress import ProgressFn

log = logging.getLogger(__name__)

AGENT_NAME = "benchfarm-local"

__all__ = ["run_bundle", "agent_info", "input_seed"]


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def agent_info() -> AgentInfo:
    return AgentInfo(name=f"{AGENT_NAME}@{socket.gethostname()}", version=_version("benchfarm"))


def input_seed(run_id: str, job_id: str, entry: BundleEntry) -> int:
    """Inputs are fresh per run (seeded by run, job and case) and reproducible from the result."""
    text = f"{run_id}/{job_id}/{entry.case}/{entry.target}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def _environment(device: LocalDevice) -> dict[str, str]:
    runtime = {"cuda": {"cuda_bindings": _version("cuda-bindings")}}.get(device.device_class.runtime, {
        "iree_runtime": _version("iree-base-runtime"), "hal_driver": device.device_class.hal_driver or "",
    })
    return {
        **runtime,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpu": device.info.name if device.device_class.kind == "cpu" else platform.processor(),
        "os": platform.platform(),
    }


@dataclass(frozen=True)
class _Runner:
    """A device of one runtime and the functions that load and check one entry on it: the compiled
    artifacts' runner, and for vendor controls (entries with `launch.torch`) the PyTorch one, where
    the device class has one (NVIDIA: the same CudaDevice times both)."""

    device: Any
    prepare_entry: Callable[..., CheckedKernel | CaseResult]
    prepare_vendor: Callable[..., CheckedKernel | CaseResult] | None = None

    def for_entry(self, entry: BundleEntry) -> Callable[..., CheckedKernel | CaseResult] | None:
        vendor = entry.launch is not None and entry.launch.torch is not None
        return self.prepare_vendor if vendor else self.prepare_entry


def _runner(device: LocalDevice) -> _Runner:
    """The runtime the device class names: IREE (through its HAL driver) or the CUDA driver API (and
    PyTorch on the same device for vendor controls)."""
    device_class = device.device_class
    if isinstance(device.transport, AdbTransport) and device_class.hal_driver:   # a phone: IREE's tools through adb
        from pipeline.agents.runners import adb_runner

        return _Runner(adb_runner.AdbPhone(device.transport, device_class.hal_driver), adb_runner.prepare_entry)
    if device_class.runtime == "cuda":
        from pipeline.agents.runners import (  # cuda.bindings / torch: imported when used
            cuda_runner,
            torch_runner,
        )

        return _Runner(cuda_runner.CudaDevice(device.info.uid), cuda_runner.prepare_entry, torch_runner.prepare_entry)
    if device_class.runtime == "iree" and device_class.hal_driver:
        return _Runner(IreeDevice(device_class.hal_driver), prepare_entry)
    raise ValueError(f"device class {device_class.name} runs {device_class.runtime}, which this agent cannot run")


def _free_bytes(runner: _Runner) -> int | None:
    """The device memory free now, where the runner's device can tell (CUDA), else None."""
    free = getattr(runner.device, "free_bytes", None)
    return free() if callable(free) else None


def _trim(runner: _Runner) -> None:
    """Memory a framework keeps of released buffers given back, where the runner's device has a cache
    (CUDA: torch's): the next group's buffers, or the next job's, need it."""
    trim = getattr(runner.device, "trim", None)
    if callable(trim):
        trim()


class _References:
    """Reference functions imported once per module from the bundle's shipped suite copy."""

    def __init__(self, suite_dir: Path):
        self.suite_dir = suite_dir
        self._modules: dict[str, Any] = {}

    def get(self, module: str, function: str) -> Callable[..., Any]:
        if module not in self._modules:
            self._modules[module] = load_suite_module(self.suite_dir, module)
        fn: object = getattr(self._modules[module], function, None)
        if not callable(fn):
            raise AttributeError(f"reference module {module} has no function {function}")
        return fn


def run_bundle(
    *,
    bundle_dir: Path,
    manifest: BundleManifest,
    device: LocalDevice,
    run_id: str,
    job_id: str,
    settings: MeasurementSettings,
    progress: ProgressFn | None = None,
    base_bundle_dir: Path | None = None,
    base_manifest: BundleManifest | None = None,
    check_cache: CheckCache | None = None,
    time_unchanged: bool = True,
    rule: DecisionRule | None = None,
    counter_cache: CounterCache | None = None,
) -> ResultDocument:
    """Check and time every entry of the bundle whose target this device runs.

    Built entries: ok (samples + stats), wrong (correctness, no samples) or error (the reason).
    Entries that failed to compile: skipped, with the compile error. One case's failure never
    stops the others. `settings` are taken for the device's class (`measure.for_device`).
    A binary whose check passed on this device class before (`check_cache`) is not checked again.

    Timing: round-robin over the cases, at least `min_rounds` and at most `rounds` rounds, and no
    more than `min_rounds` once the job's timing has run `timing_budget_s`. After `min_rounds` a case
    stops once decided (`pipeline.contracts.rounds`, the analysis's own statistic): paired, once its
    verdict under `rule` is same or different; unpaired, once the 95 % interval of its own level is
    within `round_ci_target`. Each result's environment says how many rounds it took and why it
    stopped (`stopped`). Before a group is timed, the hardware counters of its checked binaries (and of
    their paired bases) are taken once, where the device has a profiler and `settings.counters` allows,
    or reused from `counter_cache` (`pipeline.agents.counters`); each ok result carries them, or says
    in its environment why it has none. Round r is timed on buffer copy r mod n (`placements`), so the run
    averages several placements. The result records the samples of each round (`rounds`). Where one
    copy of every timed case is over the job's placement budget (a small GPU), the cases are checked
    and timed in groups that fit (`placement.timing_groups`), each released before the next is checked.

    Paired (docs/design.md, "Measurement": pair what is compared): with `base_bundle_dir` and
    `base_manifest`, every case that both bundles have and that passes its check in both is timed
    with the base's entry back to back, pair by pair in ABBA order (`measure.measure_pairs`), on
    the head's own buffers (same inputs, same output, same addresses: the two slots are equal).
    A base entry with the head's binary digest is not checked again. With `time_unchanged` False
    (pull requests), cases whose binary equals the base's, or whose code does (`BundleEntry.code_digest`:
    the same instructions, launch and inputs, names aside), are not timed but `unchanged_sentinels`
    of them (chosen by the run, so they rotate): the others are reported skipped, "not timed:
    same binary" or "not timed: same code" (`settings.time_same_code`: same code is timed), checked
    only where neither binary has passed a check on this class before. Only head results are
    returned: the base is a reference for this job.
    """
    bundle_dir = Path(bundle_dir)
    device_class = device.device_class
    settings = for_device(settings, device_class.name, device_class.kind)
    if (base_bundle_dir is None) != (base_manifest is None):
        raise ValueError("a paired run needs both base_bundle_dir and base_manifest")
    if base_manifest is not None and base_manifest.commit == manifest.commit:
        raise ValueError(f"base and head are the same commit {manifest.commit[:12]}; pair two commits")
    runner = _runner(device)
    collector = CounterCollector(device, settings, counter_cache)
    started = datetime.now(timezone.utc)
    entries = [e for e in manifest.entries if e.target in device_class.targets]
    base_entries = {(e.case, e.target): e for e in base_manifest.entries} if base_manifest is not None else {}
    same = {i for i, e in enumerate(entries) if _same_binary(e, base_entries.get((e.case, e.target)))}
    same_code = {i for i, e in enumerate(entries) if i not in same and not settings.time_same_code
                 and _same_code(e, base_entries.get((e.case, e.target)))}
    unchanged = same | same_code
    untimed = set() if time_unchanged else unchanged - _sentinels(run_id, entries, unchanged, settings.unchanged_sentinels)
    references = _References(bundle_dir / manifest.suite_source)
    # every timed case of a group holds its buffer copies at once (round-robin): planned per group
    timed_entries = [i for i, e in enumerate(entries)
                     if i not in untimed and e.status == "built" and runner.for_entry(e) is not None]
    free_bytes = _free_bytes(runner) if timed_entries else None
    budget = job_budget(settings, free_bytes)
    buffer_bytes = {i: sum(t.nbytes for t in entries[i].tensors) for i in timed_entries}   # one copy of each
    groups = [[timed_entries[k] for k in group]
              for group in timing_groups([buffer_bytes[i] for i in timed_entries], budget)] if timed_entries else []
    results: dict[int, CaseResult] = {}
    checks = {"run": 0, "reused": 0}   # correctness checks made, and outcomes reused (cache, same binary)
    steps = _Steps(progress, checks=len(entries), rounds=settings.rounds * len(timed_entries))
    job = _Job(runner=runner, device_class=device_class, settings=settings, run_id=run_id, job_id=job_id,
               check_cache=check_cache, checks=checks, steps=steps, rule=rule or DecisionRule())
    for index, entry in enumerate(entries):   # what is not timed: its result now, no buffers held
        if index in buffer_bytes:   # timed: checked with its group below
            continue
        if index in untimed:
            assert base_manifest is not None
            results[index] = job.check_unchanged(bundle_dir, entry, base_entries.get((entry.case, entry.target)),
                                                 references, base_manifest.commit)
        else:
            outcome = _prepare(runner, bundle_dir, entry, references, run_id, job_id)
            assert isinstance(outcome, CaseResult)   # not built, or no runner for it here
            results[index] = outcome
        steps.check(f"checking: {entry.case} on {device_class.name}")
    for number, group in enumerate(groups, start=1):
        copies = dict(zip(group, plan_placements([buffer_bytes[i] for i in group], settings, free_bytes=free_bytes)))
        checked: dict[int, CheckedKernel] = {}
        for index in group:
            outcome = job.check(bundle_dir, entries[index], references, copies[index],
                                keep_inputs=(entries[index].case, entries[index].target) in base_entries)
            if isinstance(outcome, CaseResult):
                results[index] = outcome
            else:
                checked[index] = outcome
        bases, notes = _prepare_bases(runner, checked, base_bundle_dir, base_manifest, run_id, job_id,
                                      check_cache, device_class.name, progress, checks)
        held = {index: kernel.placements for index, kernel in checked.items()}   # before they are released
        counted = _counters(collector, bundle_dir, base_bundle_dir, checked, bases, run_id, job_id)
        timed = job.time(checked, bases, results)
        _trim(runner)
        for index, kernel in checked.items():
            seed = input_seed(run_id, job_id, kernel.entry)
            environment = {**kernel.environment, "input_seed": str(seed), "placements": str(held[index]),
                           **({"timing_group": f"{number}/{len(groups)}"} if len(groups) > 1 else {}),
                           **notes.get(index, {})}
            results[index] = _with_counters(timed[index].result(kernel, environment, bases.get(index), base_manifest),
                                            *counted[index])
    collector.close()
    steps.done()
    return ResultDocument(
        run_id=run_id, job_id=job_id, repository=manifest.repository, commit=manifest.commit,
        # the whole bundle's digest: `manifest` may be a selection of its entries
        bundle_digest=bundle_digest(load_bundle(bundle_dir)), device=device.info, agent=agent_info(),
        started_at=started, finished_at=datetime.now(timezone.utc),
        environment={**_environment(device), "checks_run": str(checks["run"]), "checks_reused": str(checks["reused"]),
                     "counters_taken": str(collector.taken), "counters_reused": str(collector.reused),
                     "counters_s": f"{collector.seconds:.2f}",
                     **({"placement_budget_bytes": str(budget)} if budget is not None and timed_entries else {}),
                     **({"timing_groups": str(len(groups))} if len(groups) > 1 else {})},
        results=[results[index] for index in range(len(entries))],
    )


@dataclass
class _Steps:
    """The job's progress: entries checked of `checks`, timing steps (a case's round) of `rounds`, the
    rounds of the cases still to be timed (a case that fails its check takes its rounds off)."""

    progress: ProgressFn | None
    checks: int
    rounds: int
    checked: int = 0
    timed: int = 0

    def check(self, message: str) -> None:
        self.checked += 1
        if self.progress:
            self.progress(message, self.checked, self.checks)

    def time(self, message: str | None, steps: int = 1) -> None:
        self.timed += steps
        if self.progress and message:
            self.progress(message, self.timed, self.rounds)

    def done(self) -> None:
        if self.progress:
            self.progress("timing: done", self.rounds, self.rounds)


@dataclass
class _Job:
    """What checking and timing one group of a job's cases needs from the job around it."""

    runner: _Runner
    device_class: DeviceClass
    settings: MeasurementSettings
    run_id: str
    job_id: str
    check_cache: CheckCache | None
    checks: dict[str, int]
    steps: _Steps
    rule: DecisionRule
    timing_started: float | None = None
    """monotonic time the job's first round began (the budget counts across its timing groups)"""

    def check(self, bundle_dir: Path, entry: BundleEntry, references: _References, placements: int, *,
              keep_inputs: bool) -> CheckedKernel | CaseResult:
        """The case checked (or its check's outcome reused) and held on `placements` copies; the host
        copies of its inputs kept only where a base will be checked on them (`keep_inputs`)."""
        verified = self.check_cache.get(entry, self.device_class.name) if self.check_cache is not None else None
        self.checks["reused" if verified is not None else "run"] += 1
        outcome = _prepare(self.runner, bundle_dir, entry, references, self.run_id, self.job_id, verified=verified,
                           placements=placements)
        if isinstance(outcome, CaseResult):
            self.steps.rounds -= self.settings.rounds   # never timed
        else:
            if self.check_cache is not None:
                self.check_cache.put(entry, self.device_class.name, outcome.correctness)
            if outcome.workspace is not None and not keep_inputs:
                outcome.workspace.memo.clear()
        self.steps.check(f"checking: {entry.case} on {self.device_class.name}")
        return outcome

    def check_unchanged(self, bundle_dir: Path, entry: BundleEntry, base: BundleEntry | None,
                        references: _References, base_commit: str) -> CaseResult:
        """The result of a case not timed because its binary or its code is the base's: skipped, after a
        check only where neither binary ever passed one on this device class (a new class, a cleared
        cache), so that a wrong kernel is said even when it is not timed."""
        same = "binary" if _same_binary(entry, base) else "code"
        skipped = CaseResult(case=entry.case, target=entry.target, status="skipped", binary_digest=entry.binary_digest(),
                             code_digest=entry.code_digest(), reason=f"not timed: same {same} as base {base_commit[:12]} "
                                    "(drift sentinels and full runs time it)")
        cache, name = self.check_cache, self.device_class.name
        if cache is None or entry.status != "built" or self.runner.for_entry(entry) is None:
            return skipped
        if cache.get(entry, name) is not None or (base is not None and cache.get(base, name) is not None):
            return skipped
        self.checks["run"] += 1
        outcome = _prepare(self.runner, bundle_dir, entry, references, self.run_id, self.job_id)
        if isinstance(outcome, CaseResult):   # wrong, or an error: said though the case is not timed
            return outcome
        outcome.release()
        cache.put(entry, name, outcome.correctness)
        return skipped

    def time(self, checked: dict[int, CheckedKernel], bases: dict[int, CheckedKernel],
             results: dict[int, CaseResult]) -> dict[int, _Timed]:
        """Round-robin timing of the checked cases (each with its base where paired), then every kernel
        released. A case whose timing fails gets its error in `results` and leaves `checked`."""
        # Round-robin: every checked case gets a share of its budget in each round, so a passing
        # disturbance on the host lands on every case a little rather than on one case entirely.
        settings, steps = self.settings, self.steps
        timed = {index: _Timed() for index in checked}
        round_settings = per_round(settings)
        active = dict(checked)

        def waiting(message: str) -> None:
            log.info("%s: %s", self.device_class.name, message)
            steps.time(f"timing: {message}", 0)

        # a compile beside CPU timing reads as a change (pipeline.host_lock): timing waits for it, and holds it off
        lock = settings.host_lock if self.device_class.kind == "cpu" and checked else ""
        try:
            with cpu_timing(lock, on_wait=waiting):
                if self.timing_started is None:
                    self.timing_started = time.monotonic()
                for round_number in range(1, settings.rounds + 1):
                    for index, kernel in list(active.items()):
                        base = bases.get(index)
                        kernel.select(round_number - 1)
                        try:
                            if base is None:
                                timed[index].add(measure(kernel.read, round_settings,
                                                         default_clock_mhz=kernel.default_clock_mhz))
                            else:
                                pairs = measure_pairs(base.read, kernel.read, round_settings,
                                                      first_pair=len(timed[index].head.readings),
                                                      default_clock_mhz=kernel.default_clock_mhz)
                                timed[index].add(pairs[1], base=pairs[0])
                        except Exception as exc:  # a kernel that fails while timed is an error; the others go on
                            log.warning("case %s timing failed: %s", kernel.entry.case, exc)
                            results[index] = _error(kernel.entry, exc)
                            del active[index]
                            del checked[index]
                            if base is not None:
                                base.release()
                                del bases[index]
                            kernel.release()
                            steps.time(None, settings.rounds - round_number)
                        steps.time(f"timing: round {round_number}/{settings.rounds} {kernel.entry.case}")
                    if round_number >= settings.min_rounds:
                        over_budget = time.monotonic() - self.timing_started >= settings.timing_budget_s
                        changes = _paired_changes(timed, checked, bases)
                        for index in list(active):
                            reason = (self.rule.decided(str(checked[index].entry.case), changes[index])
                                      if index in changes else timed[index].precise(settings.round_ci_target))
                            if reason is None and (over_budget or round_number == settings.rounds):
                                reason = "timing budget" if over_budget else "round cap"
                            if reason is not None:
                                timed[index].stopped = reason
                                del active[index]
                                steps.time(None, settings.rounds - round_number)
                    if not active:
                        break
        finally:
            for kernel in [*bases.values(), *checked.values()]:   # bases first: they time on their head's buffers
                kernel.release()
        return timed


def _counters(collector: CounterCollector, bundle_dir: Path, base_bundle_dir: Path | None,
              checked: dict[int, CheckedKernel], bases: dict[int, CheckedKernel], run_id: str, job_id: str,
              ) -> dict[int, tuple[HardwareCounters | None, str, HardwareCounters | None]]:
    """Per checked case: its counters, what its environment says of them, and its paired base's counters
    (taken on the same inputs: the base checks on its head's buffers, drawn from the same seed)."""
    requests = [CounterRequest(bundle_dir, kernel.entry, input_seed(run_id, job_id, kernel.entry), kernel)
                for kernel in checked.values()]
    paired = [index for index in checked if index in bases] if base_bundle_dir is not None else []
    if base_bundle_dir is not None:
        requests += [CounterRequest(base_bundle_dir, bases[index].entry,
                                    input_seed(run_id, job_id, checked[index].entry), bases[index]) for index in paired]
    taken = collector.collect(requests)
    heads = dict(zip(checked, taken[:len(checked)], strict=True))
    base_counters = {index: counters for index, (counters, _) in zip(paired, taken[len(checked):], strict=True)}
    return {index: (*heads[index], base_counters.get(index)) for index in checked}


def _with_counters(result: CaseResult, counters: HardwareCounters | None, note: str,
                   base_counters: HardwareCounters | None) -> CaseResult:
    """An ok result with its counters (and its paired base's) and the note saying how they were taken or
    why there are none; another result as it is (no counters: it was not measured)."""
    if result.status != "ok":
        return result
    paired = result.paired_base
    if paired is not None and base_counters is not None:
        paired = paired.model_copy(update={"counters": base_counters})
    return result.model_copy(update={"counters": counters, "paired_base": paired,
                                     "environment": {**result.environment, COUNTERS_KEY: note}})


def _paired_changes(timed: dict[int, _Timed], checked: dict[int, CheckedKernel], bases: dict[int, CheckedKernel]
                    ) -> dict[int, RoundChange]:
    """The change of every paired case timed so far, as the analysis will compute it: its identical
    binaries (drift sentinels, nightlies' unchanged cases) calibrate the others' intervals, vendor
    controls and suite cases apart (`pipeline.contracts.rounds.paired_changes`)."""
    indices = [i for i in checked if i in bases and timed[i].rounds]
    if not indices:
        return {}
    changes = paired_changes(
        [(timed[i].base.samples, timed[i].head.samples, timed[i].rounds) for i in indices],
        calibration=[_same_binary(checked[i].entry, bases[i].entry) for i in indices],
        groups=["control" if _is_vendor(checked[i].entry) else "suite" for i in indices])
    return dict(zip(indices, changes, strict=True))


def _is_vendor(entry: BundleEntry) -> bool:
    return entry.launch is not None and entry.launch.torch is not None


def _same_binary(entry: BundleEntry, base: BundleEntry | None) -> bool:
    digest = entry.binary_digest()
    return base is not None and digest is not None and base.binary_digest() == digest


def _same_code(entry: BundleEntry, base: BundleEntry | None) -> bool:
    digest = entry.code_digest()
    return base is not None and digest is not None and base.code_digest() == digest


def _sentinels(run_id: str, entries: list[BundleEntry], same: set[int], count: int) -> set[int]:
    """`count` of the unchanged cases, chosen by hashing the run with each case: another run, others."""
    def rank(index: int) -> bytes:
        return hashlib.sha256(f"{run_id}/{entries[index].case}/{entries[index].target}".encode()).digest()
    return set(sorted(same, key=rank)[:count])


@dataclass
class _Timed:
    """What the rounds gave one case: its readings, the base's paired with them, throttled discards, preempted samples."""

    head: Measured = field(default_factory=Measured)
    base: Measured = field(default_factory=Measured)
    rounds: list[int] = field(default_factory=list)
    """samples kept in each round (a round that kept none is not listed)"""
    stopped: str | None = None
    """why no more rounds were taken (`decided`, the round cap, the job's timing budget)"""

    def add(self, head: Measured, base: Measured | None = None) -> None:
        if head.readings:
            self.rounds.append(len(head.readings))
        self.head.readings.extend(head.readings)
        self.head.throttled += head.throttled
        self.head.preempted += head.preempted
        if base is not None:
            self.base.readings.extend(base.readings)

    def precise(self, target: float) -> str | None:
        """"precise" once the 95 % interval of this unpaired case's level is within `target` (in logs)."""
        if not self.rounds:
            return None
        return "precise" if level_halfwidth(self.head.samples, self.rounds) <= target else None

    def result(self, kernel: CheckedKernel, environment: dict[str, str], base: CheckedKernel | None,
               base_manifest: BundleManifest | None) -> CaseResult:
        entry, readings = kernel.entry, self.head.readings
        environment["rounds"] = str(len(self.rounds))
        if self.stopped is not None:
            environment["stopped"] = self.stopped
        if kernel.default_clock_mhz is not None:   # throttling could be judged: say how often it was seen
            environment["throttled_samples_discarded"] = str(self.head.throttled)
            environment["default_sm_clock_mhz"] = f"{kernel.default_clock_mhz:g}"
        if kernel.off_cpu_s:   # the thread's CPU time was taken: say how often another process took its core
            environment["preempted_samples"] = str(self.head.preempted)
        if not readings:
            return CaseResult(case=entry.case, target=entry.target, status="error", environment=environment,
                              reason=f"no sample kept: all {self.head.throttled} were taken with the GPU throttled")
        samples = [r.seconds for r in readings]
        clocks = [r.sm_clock_mhz for r in readings]
        temperatures = [r.temperature_c for r in readings]
        paired = None
        if base is not None and base_manifest is not None:
            paired = PairedBase(commit=base_manifest.commit, samples=[r.seconds for r in self.base.readings],
                                binary_digest=base.entry.binary_digest(), code_digest=base.entry.code_digest())
        return CaseResult(
            case=entry.case, target=entry.target, status="ok", samples=samples, stats=summarize(samples),
            correctness=kernel.correctness, environment=environment,
            sample_clocks_mhz=None if None in clocks else clocks,
            sample_temperatures_c=None if None in temperatures else temperatures,
            paired_base=paired, rounds=list(self.rounds), binary_digest=entry.binary_digest(),
            code_digest=entry.code_digest(),
        )


def _prepare_bases(
    runner: _Runner, checked: dict[int, CheckedKernel], base_bundle_dir: Path | None,
    base_manifest: BundleManifest | None, run_id: str, job_id: str,
    check_cache: CheckCache | None, device_class: str, progress: ProgressFn | None, checks: dict[str, int],
) -> tuple[dict[int, CheckedKernel], dict[int, dict[str, str]]]:
    """The base's checked kernel for every checked head case the base bundle has (same case and
    target), on the head's buffers when both take the same tensors; a note for each head case whose
    base could not be paired or shares no buffers. A base of the head's binary is not checked again."""
    if base_bundle_dir is None or base_manifest is None:
        return {}, {}
    base_entries = {(e.case, e.target): e for e in base_manifest.entries}
    references = _References(Path(base_bundle_dir) / base_manifest.suite_source)
    bases: dict[int, CheckedKernel] = {}
    notes: dict[int, dict[str, str]] = {}
    wanted = [(i, base_entries[(k.entry.case, k.entry.target)]) for i, k in checked.items()
              if (k.entry.case, k.entry.target) in base_entries]
    for done, (index, entry) in enumerate(wanted, start=1):
        head = checked[index]
        shared = head.workspace if entry.tensors == head.entry.tensors else None
        same = _same_binary(head.entry, entry)
        if same:
            verified: Correctness | None = head.correctness
        else:
            verified = check_cache.get(entry, device_class) if check_cache is not None else None
        checks["reused" if verified is not None else "run"] += 1
        if same and shared is not None and _is_vendor(entry):
            # A vendor control runs this host's library, not the bundle: base and head are one call on
            # the same buffers. Graphs captured apart carried fixed offsets of their own (paired A/A on an
            # H100: 7 controls at -2 to -5 %), so the base replays the head's graphs (and shares its clock
            # readings); nothing is released twice.
            outcome: CheckedKernel | CaseResult = replace(head, release=lambda: None)
            notes[index] = {"paired_base": "the head's own graphs: a vendor control is the same call in both slots"}
        else:
            outcome = _prepare(runner, Path(base_bundle_dir), entry, references, run_id, job_id,
                               verified=verified, workspace=shared, placements=head.placements)
        if isinstance(outcome, CaseResult):
            notes[index] = {"unpaired": f"base {base_manifest.commit[:12]} is {outcome.status}: "
                                        f"{(outcome.reason or '')[:300]}"}
        else:
            bases[index] = outcome
            if check_cache is not None:
                check_cache.put(entry, device_class, outcome.correctness)
            if shared is None:
                notes[index] = {"paired_buffers": "separate: base and head take different tensors"}
        if head.workspace is not None:   # the host copies of inputs and the reference: not needed any more
            head.workspace.memo.clear()
        if progress:
            progress(f"checking base: {entry.case}", done, len(wanted))
    return bases, notes


def _error(entry: BundleEntry, exc: Exception) -> CaseResult:
    return CaseResult(case=entry.case, target=entry.target, status="error",
                      reason=f"{type(exc).__name__}: {exc}"[:4000])


def _prepare(
    runner: _Runner, bundle_dir: Path, entry: BundleEntry, references: _References,
    run_id: str, job_id: str, *,
    verified: Correctness | None = None, workspace: Workspace | None = None, placements: int = 1,
) -> CheckedKernel | CaseResult:
    """A kernel that passed its check, or the case's final result (skipped, wrong or error); held on
    `placements` buffer copies unless it times on `workspace`."""
    if entry.status == "failed":
        return CaseResult(case=entry.case, target=entry.target, status="skipped",
                          reason=f"not built: {entry.error}")
    seed = input_seed(run_id, job_id, entry)
    prepare = runner.for_entry(entry)
    if prepare is None:
        return CaseResult(case=entry.case, target=entry.target, status="skipped",
                          reason="vendor (torch) controls run on NVIDIA device classes only")
    try:
        assert entry.reference is not None
        reference_fn = references.get(entry.reference.module, entry.reference.function)
        outcome = prepare(
            device=runner.device, bundle_dir=bundle_dir, entry=entry, reference_fn=reference_fn,
            rng=np.random.default_rng(seed), placements=placements, workspace=workspace, verified=verified,
        )
    except Exception as exc:  # one case's error is its result; the others go on
        log.warning("case %s on %s: %s", entry.case, entry.target, exc)
        outcome = _error(entry, exc)
    if isinstance(outcome, CaseResult):
        return outcome.model_copy(update={"environment": {**outcome.environment, "input_seed": str(seed)},
                                          "binary_digest": entry.binary_digest(),
                                          "code_digest": entry.code_digest()})
    return outcome
