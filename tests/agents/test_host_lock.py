"""The host lock between compiles and CPU timing (pipeline.host_lock), held by real processes: a
CPU job's timing waits while another process compiles, a build waits while another process times
on the CPU, and compiles share the lock with each other. Each test uses a lock file of its own."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipeline.agents.devices import LocalDevice
from pipeline.agents.local import run_bundle
from pipeline.build.bundle import build_bundle
from pipeline.build.suite_loader import locate_suite, resolve_commit
from pipeline.config import MeasurementSettings
from pipeline.host_lock import cpu_timing, holders
from tests.helpers.cpu import x86_64_cpu
from tests.helpers.host_lock import Holder
from tests.helpers.suite_repo import GemmCase, gemm_suite_files, make_suite_repo

HOLD_S = 0.5
"""How long timing holds the CPU in the turnstile's test: the compile waiting behind it polls every 0.1 s."""


def _build(repo: Path, tmp: Path, lock: Path, progress) -> tuple[Path, object]:  # type: ignore[no-untyped-def]
    location = locate_suite(repo / "kernels")
    return build_bundle(location=location, sha=resolve_commit(location), targets=["llvm-cpu:x86_64"],
                        out_dir=tmp / "bundles", cache_dir=tmp / "cache", workers=1, progress=progress,
                        host_lock=str(lock))


def _quick(lock: Path) -> MeasurementSettings:
    """Two short rounds, timed under `lock`."""
    return MeasurementSettings(warmup_s=0.01, min_samples=4, min_time_s=0.02, max_time_s=0.2, rounds=2,
                               min_rounds=2, device_overrides={}, host_lock=str(lock))


@pytest.fixture(scope="module")
def device() -> LocalDevice:
    return x86_64_cpu()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_suite_repo(tmp_path_factory.mktemp("lock-repo"), gemm_suite_files([GemmCase("alpha", 64, 64, 64)]))


def test_a_build_waits_while_another_process_times_on_the_cpu(repo: Path, tmp_path: Path) -> None:
    lock = tmp_path / "host.lock"
    timing = Holder("cpu_timing", lock)
    seen: list[tuple[float, str]] = []
    done: list[float] = []
    waits = threading.Event()

    def progress(message: str, *_: object) -> None:
        seen.append((time.monotonic(), message))
        if "waiting for" in message:
            waits.set()

    def build() -> None:
        _build(repo, tmp_path, lock, progress)
        done.append(time.monotonic())

    builder = threading.Thread(target=build)
    builder.start()
    assert waits.wait(120), seen
    assert not done, "the build finished while another process timed on the CPU"
    timing.release()
    builder.join(timeout=120)
    assert done and done[0] > timing.released_at
    waits = [message for _, message in seen if "waiting for CPU timing on this host" in message]
    assert waits and str(lock) in waits[0] and f"pid {timing.proc.pid} (python" in waits[0], seen
    compiled = [at for at, message in seen if not message.startswith("build: waiting")]
    assert compiled and min(compiled) > timing.released_at, seen


def test_cpu_timing_waits_while_another_process_compiles(repo: Path, device: LocalDevice, tmp_path: Path) -> None:
    lock = tmp_path / "host.lock"
    bundle_dir, manifest = _build(repo, tmp_path, lock, None)
    compiles = Holder("compiling", lock)
    seen: list[tuple[float, str]] = []
    settings = _quick(lock)
    documents: list[object] = []
    waits = threading.Event()

    def progress(message: str, *_: object) -> None:
        seen.append((time.monotonic(), message))
        if "waiting for" in message:
            waits.set()

    def run() -> None:
        documents.append(run_bundle(bundle_dir=bundle_dir, manifest=manifest, device=device, run_id="r", job_id="j",  # type: ignore[arg-type]
                                    settings=settings, progress=progress))

    job = threading.Thread(target=run)
    job.start()
    assert waits.wait(120), seen
    assert not documents, "the job finished its timing while another process compiled"
    compiles.release()
    job.join(timeout=120)
    assert documents and all(r.status == "ok" for r in documents[0].results)  # type: ignore[attr-defined]
    waits = [message for _, message in seen if "waiting for a compile on this host" in message]
    assert waits and str(lock) in waits[0] and f"pid {compiles.proc.pid} (python" in waits[0], seen
    rounds = [at for at, message in seen if message.startswith("timing: round")]
    assert rounds and min(rounds) > compiles.released_at, seen


def test_timing_that_waits_for_compiles_is_not_passed_by_later_compiles(tmp_path: Path) -> None:
    """flock has no queue: without the turnstile a compile that starts while timing waits would join
    the running ones, and a stream of overlapping builds would keep timing out for good."""
    lock = tmp_path / "host.lock"
    first = Holder("compiling", lock)
    timed: list[float] = []
    later: list[tuple[Holder, float]] = []   # the compile, when it got the lock
    timing_waits, later_waits = threading.Event(), threading.Event()

    def time_it() -> None:
        with cpu_timing(str(lock), on_wait=lambda _: timing_waits.set()):
            timed.append(time.monotonic())
            time.sleep(HOLD_S)   # the CPU held a while: the waiting compile polls the lock meanwhile
        timed.append(time.monotonic())

    timing = threading.Thread(target=time_it)
    timing.start()
    assert timing_waits.wait(60)   # timing waits for the first compile now
    compile_later = threading.Thread(
        target=lambda: later.append((Holder("compiling", lock, waiting=later_waits), time.monotonic())))
    compile_later.start()
    try:
        assert later_waits.wait(60), "the later compile never waited"
        assert not later, "a compile joined the running one while timing waited for it"
        first.release()
        timing.join(timeout=30)
        compile_later.join(timeout=30)
        assert len(timed) == 2 and timed[0] > first.released_at
        assert later and later[0][1] >= timed[1], "the later compile ran beside the timing"
    finally:
        first.release_if_held()
        compile_later.join(timeout=30)
        for holder, _ in later:
            holder.release_if_held()


def test_compiles_share_the_lock_and_an_empty_path_takes_none(tmp_path: Path) -> None:
    lock = tmp_path / "host.lock"
    first, second = Holder("compiling", lock), Holder("compiling", lock)   # both hold it at once
    try:
        blocked = subprocess.run([sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY)\n"
                                  "try:\n fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n"
                                  " sys.exit(3)", str(lock)], timeout=10, check=False)
        assert blocked.returncode == 3, "an exclusive lock was granted beside two compiles"
        assert sorted((h.pid, h.exclusive) for h in holders(str(lock))) == sorted(
            [(first.proc.pid, False), (second.proc.pid, False)])
        with cpu_timing(""):   # no lock at all: does not wait for the compiles
            pass
    finally:
        first.release()
        second.release()


def test_a_lock_that_cannot_be_opened_fails_the_job_naming_it(repo: Path, device: LocalDevice, tmp_path: Path) -> None:
    from pipeline.host_lock import HostLockError

    bundle_dir, manifest = _build(repo, tmp_path, tmp_path / "host.lock", None)
    unopenable = tmp_path / "no-such-dir" / "host.lock"
    settings = _quick(unopenable)
    with pytest.raises(HostLockError, match=f"cannot open the host lock {unopenable}.*BENCHFARM_MEASUREMENT__HOST_LOCK"):
        run_bundle(bundle_dir=bundle_dir, manifest=manifest, device=device, run_id="r", job_id="j",  # type: ignore[arg-type]
                   settings=settings)
