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

from pipeline.agents.devices import LocalDevice
from pipeline.agents.runners.iree_runner import IreeDevice, run_entry
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
    """A device of one runtime and the function that checks and times one entry on it."""

    device: Any
    run_entry: Callable[..., CaseResult]


def _runner(device: LocalDevice) -> _Runner:
    """The runtime the device class names: IREE (through its HAL driver) or the CUDA driver API."""
    device_class = device.device_class
    if device_class.runtime == "cuda":
        from pipeline.agents.runners import cuda_runner  # imports cuda.bindings when a GPU is used, only

        return _Runner(cuda_runner.CudaDevice(device.info.uid), cuda_runner.run_entry)
    if device_class.runtime == "iree" and device_class.hal_driver:
        return _Runner(IreeDevice(device_class.hal_driver), run_entry)
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
    results: list[CaseResult] = []
    for done, entry in enumerate(entries, start=1):
        results.append(_run_one(runner, bundle_dir, entry, references, run_id, job_id, settings))
        result = results[-1]
        if progress:
            figure = f" {result.stats.median * 1e3:.3f} ms" if result.stats else ""
            progress(f"{result.status} {entry.case} on {device_class.name}{figure}", done, len(entries))
    return ResultDocument(
        run_id=run_id, job_id=job_id, repository=manifest.repository, commit=manifest.commit,
        bundle_digest=bundle_digest(bundle_dir), device=device.info, agent=agent_info(),
        started_at=started, finished_at=datetime.now(timezone.utc), environment=_environment(device),
        results=results,
    )


def _run_one(
    runner: _Runner, bundle_dir: Path, entry: BundleEntry, references: _References,
    run_id: str, job_id: str, settings: MeasurementSettings,
) -> CaseResult:
    if entry.status == "failed":
        return CaseResult(case=entry.case, target=entry.target, status="skipped",
                          reason=f"not built: {entry.error}")
    seed = input_seed(run_id, job_id, entry)
    try:
        assert entry.reference is not None
        reference_fn = references.get(entry.reference.module, entry.reference.function)
        result = runner.run_entry(
            device=runner.device, bundle_dir=bundle_dir, entry=entry, reference_fn=reference_fn,
            rng=np.random.default_rng(seed), settings=settings,
        )
    except Exception as exc:  # one case's error is its result; the others go on
        log.warning("case %s on %s: %s", entry.case, entry.target, exc)
        result = CaseResult(case=entry.case, target=entry.target, status="error",
                            reason=f"{type(exc).__name__}: {exc}"[:4000])
    return result.model_copy(update={"environment": {**result.environment, "input_seed": str(seed)}})
