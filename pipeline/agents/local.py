"""Run a bundle on a device of this host and produce the job's ResultDocument."""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import platform
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.agents.adb import AdbTransport
from pipeline.agents.devices import LocalDevice
from pipeline.agents.measure import sample
from pipeline.agents.runners import CheckedKernel
from pipeline.agents.runners.iree_runner import IreeDevice, prepare_entry
from pipeline.results.stats import summarize
from pipeline.build.bundle import bundle_digest
from pipeline.build.suite_loader import load_suite_module
from pipeline.config import MeasurementSettings
from pipeline.contracts import BundleEntry, BundleManifest, CaseResult, ResultDocument
from pipeline.contracts.result import AgentInfo

log = logging.getLogger(__name__)

ProgressFn = Callable[[str, int, int], None]
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
    prepare_entry: Callable[..., Any]
    prepare_vendor: Callable[..., Any] | None = None

    def for_entry(self, entry: BundleEntry) -> Callable[..., Any] | None:
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
        from pipeline.agents.runners import cuda_runner, torch_runner  # cuda.bindings / torch: imported when used

        return _Runner(cuda_runner.CudaDevice(device.info.uid), cuda_runner.prepare_entry, torch_runner.prepare_entry)
    if device_class.runtime == "iree" and device_class.hal_driver:
        return _Runner(IreeDevice(device_class.hal_driver), prepare_entry)
    raise ValueError(f"device class {device_class.name} runs {device_class.runtime}, which this agent cannot run")


class _References:
    """Reference functions imported once per module from the bundle's shipped suite copy."""

    def __init__(self, suite_dir: Path):
        self.suite_dir = suite_dir
        self._modules: dict[str, Any] = {}

    def get(self, module: str, function: str) -> Callable[..., Any]:
        if module not in self._modules:
            self._modules[module] = load_suite_module(self.suite_dir, module)
        fn = getattr(self._modules[module], function, None)
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
) -> ResultDocument:
    """Check and time every entry of the bundle whose target this device runs.

    Built entries: ok (samples + stats), wrong (correctness, no samples) or error (the reason).
    Entries that failed to compile: skipped, with the compile error. One case's failure never
    stops the others.
    """
    bundle_dir = Path(bundle_dir)
    device_class = device.device_class
    runner = _runner(device)
    started = datetime.now(timezone.utc)
    entries = [e for e in manifest.entries if e.target in device_class.targets]
    references = _References(bundle_dir / manifest.suite_source)
    results: dict[int, CaseResult] = {}
    checked: dict[int, CheckedKernel] = {}
    for index, entry in enumerate(entries):
        outcome = _prepare(runner, bundle_dir, entry, references, run_id, job_id)
        if not isinstance(outcome, CaseResult):   # a checked kernel (IREE's or CUDA's), ready to time
            checked[index] = outcome
        else:
            results[index] = outcome
        if progress:
            progress(f"checking: {entry.case} on {device_class.name}", index + 1, len(entries))

    # Round-robin timing: every checked case gets a share of its budget in each round, so a passing
    # disturbance on the host lands on every case a little rather than on one case entirely.
    samples: dict[int, list[float]] = {index: [] for index in checked}
    clocks: dict[int, list[float | None]] = {index: [] for index in checked}
    round_settings = settings.per_round()
    steps, step = settings.rounds * len(checked), 0
    try:
        for round_number in range(1, settings.rounds + 1):
            for index, kernel in list(checked.items()):
                try:
                    taken = sample(kernel.run_once, round_settings)
                except Exception as exc:  # a kernel that fails while timed is an error; the others go on
                    log.warning("case %s timing failed: %s", kernel.entry.case, exc)
                    results[index] = _error(kernel.entry, exc)
                    kernel.release()
                    del checked[index]
                else:
                    samples[index].extend(taken)
                    # one reading per call, warm-up calls first: the round's last len(taken) are the samples'
                    read = kernel.clocks_mhz[-len(taken):] if kernel.clocks_mhz else []
                    clocks[index].extend(read if len(read) == len(taken) else [None] * len(taken))
                step += 1
                if progress:
                    progress(f"timing: round {round_number}/{settings.rounds} {kernel.entry.case}", step, steps)
    finally:
        for kernel in checked.values():
            kernel.release()
    for index, kernel in checked.items():
        seed = input_seed(run_id, job_id, kernel.entry)
        known = [c for c in clocks[index] if c is not None]
        results[index] = CaseResult(
            case=kernel.entry.case, target=kernel.entry.target, status="ok", samples=samples[index],
            stats=summarize(samples[index]), correctness=kernel.correctness,
            environment={**kernel.environment, "input_seed": str(seed)},
            sample_clocks_mhz=known if len(known) == len(samples[index]) else None,
        )
    return ResultDocument(
        run_id=run_id, job_id=job_id, repository=manifest.repository, commit=manifest.commit,
        bundle_digest=bundle_digest(bundle_dir), device=device.info, agent=agent_info(),
        started_at=started, finished_at=datetime.now(timezone.utc), environment=_environment(device),
        results=[results[index] for index in range(len(entries))],
    )


def _error(entry: BundleEntry, exc: Exception) -> CaseResult:
    return CaseResult(case=entry.case, target=entry.target, status="error",
                      reason=f"{type(exc).__name__}: {exc}"[:4000])


def _prepare(
    runner: _Runner, bundle_dir: Path, entry: BundleEntry, references: _References,
    run_id: str, job_id: str,
) -> CheckedKernel | CaseResult:
    """A kernel that passed its check, or the case's final result (skipped, wrong or error)."""
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
            rng=np.random.default_rng(seed),
        )
    except Exception as exc:  # one case's error is its result; the others go on
        log.warning("case %s on %s: %s", entry.case, entry.target, exc)
        outcome = _error(entry, exc)
    if isinstance(outcome, CaseResult):
        return outcome.model_copy(update={"environment": {**outcome.environment, "input_seed": str(seed)}})
    return outcome
