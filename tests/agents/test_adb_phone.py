"""End to end: phones through the real `adb` client and server, against an adbd stand-in.

The stand-in (`tests/helpers/adbd_standin.py`) speaks adbd's wire protocol on a loopback port; a
private adb server (its own port, its own HOME) connects to it with `adb connect`. The bundle is
built for `llvm-cpu:aarch64-android`, pushed to the "phone" and run there by IREE's aarch64 tools
under qemu-aarch64 (the Android-triple .vmfb loads in the glibc runtime: IREE's llvm-cpu
executables are self-contained ELF objects loaded by IREE itself, not by the system loader).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.agents.adb import Adb, AdbError, AdbTransport, DeviceGone
from pipeline.agents.devices import LocalDevice, discover_local_devices, phone_devices
from pipeline.agents.local import run_bundle
from pipeline.build.bundle import build_bundle
from pipeline.build.suite_loader import locate_suite, resolve_commit
from pipeline.config import MeasurementSettings, PhoneSettings
from pipeline.contracts import BundleManifest, CaseResult, ResultDocument, parse_result
from tests.helpers.aarch64_iree import SYSROOT, fetch_tools
from tests.helpers.adbd_standin import AdbdStandin
from tests.helpers.suite_repo import GemmCase, case_id, gemm_suite_files, make_suite_repo

pytestmark = pytest.mark.skipif(
    shutil.which("adb") is None or shutil.which("qemu-aarch64") is None,
    reason="needs the adb client and qemu-aarch64 (Debian: apt-get install adb qemu-user; infra/local.sh installs them)",
)

TARGET = "llvm-cpu:aarch64-android"
FAST = MeasurementSettings(warmup_s=0.0, min_samples=4, min_time_s=0.0, max_time_s=6.0, rounds=2)
GOOD, GOOD2, WRONG = GemmCase("good"), GemmCase("good2", m=16, n=8, k=24), GemmCase("wrong", variant="wrong")
CLUSTERS = {"Pixel 8 Pro": {"big": "100", "mid": "f0"}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def adb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private adb server (`adb -L tcp:PORT server nodaemon`), stopped by its pid at the end."""
    port = _free_port()
    home = tmp_path_factory.mktemp("adb-home")
    log = (home / "server.log").open("w")
    server = subprocess.Popen(["adb", "-L", f"tcp:{port}", "server", "nodaemon"], env={**os.environ, "HOME": str(home)},
                              stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    socket_spec = f"tcp:127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                Adb(server_socket=socket_spec, timeout_s=5).devices()
                break
            except AdbError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"adb server did not start: {(home / 'server.log').read_text()[-2000:]}") from None
                time.sleep(0.1)
        yield socket_spec
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _phone_settings(adb_server: str, **overrides: Any) -> PhoneSettings:
    if not (SYSROOT / "lib" / "ld-linux-aarch64.so.1").is_file():
        pytest.fail(f"no aarch64 glibc under {SYSROOT}: apt-get install libc6-arm64-cross libstdc++6-arm64-cross")
    values: dict[str, Any] = dict(
        enabled=True, adb_server_socket=adb_server, adb_timeout_s=60, iree_tools_dir=fetch_tools(), targets=[TARGET],
        clusters=CLUSTERS, repetitions=4, repetition_min_time_s=0.002, cooldown_max_c=45.0, cooldown_poll_s=0.2,
        cooldown_timeout_s=20.0,
    )
    return PhoneSettings(**{**values, **overrides})


def _connect(adb_server: str, root: Path, **phone: object) -> AdbdStandin:
    standin = AdbdStandin(root, **phone)  # type: ignore[arg-type]
    standin.start()
    Adb(server_socket=adb_server, timeout_s=20).connect(standin.serial)
    deadline = time.monotonic() + 10
    while Adb(server_socket=adb_server).state(standin.serial) != "device" and time.monotonic() < deadline:
        time.sleep(0.05)
    return standin


@pytest.fixture(scope="module")
def phone(adb_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbdStandin]:
    standin = _connect(adb_server, tmp_path_factory.mktemp("pixel") / "fs")
    yield standin
    Adb(server_socket=adb_server).disconnect(standin.serial)
    standin.stop()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, BundleManifest]:
    tmp = tmp_path_factory.mktemp("bundle")
    repo = make_suite_repo(tmp, gemm_suite_files([GOOD, GOOD2, WRONG]))
    location = locate_suite(repo / "kernels")
    return build_bundle(location=location, sha=resolve_commit(location), targets=[TARGET],
                        out_dir=tmp / "bundles", cache_dir=tmp / "cache", workers=2)


def _device(devices: list[LocalDevice], name: str) -> LocalDevice:
    return next(d for d in devices if d.device_class.name == name)


def _run(bundle: tuple[Path, BundleManifest], device: LocalDevice, run_id: str) -> dict[str, CaseResult]:
    bundle_dir, manifest = bundle
    document: ResultDocument = run_bundle(bundle_dir=bundle_dir, manifest=manifest, device=device, run_id=run_id,
                                          job_id="job-1", settings=FAST)
    return {r.case: r for r in parse_result(document.model_dump_json()).results}


def test_discovery_maps_models_to_cluster_classes(adb_server: str, phone: AdbdStandin) -> None:
    settings = _phone_settings(adb_server)
    devices = phone_devices(settings)
    assert sorted(d.device_class.name for d in devices) == ["pixel-8-pro-cpu-big", "pixel-8-pro-cpu-mid"]
    big = _device(devices, "pixel-8-pro-cpu-big")
    assert big.device_class.kind == "phone" and big.device_class.targets == [TARGET]
    assert big.device_class.runtime == "iree" and big.device_class.hal_driver == "local-sync"
    assert big.transport == AdbTransport(phone.serial, "100")
    assert big.info.name == "Pixel 8 Pro (Tensor G3)" and big.info.driver == "android 14 (sdk 34)"
    assert big.info.uid.startswith("STANDIN")

    # A model the settings do not name: one class, the fastest cpufreq policy (cpu8) as `big`.
    unmapped = phone_devices(settings.model_copy(update={"clusters": {}}))
    assert [(d.device_class.name, d.transport) for d in unmapped] == [("pixel-8-pro-cpu-big", AdbTransport(phone.serial, "100"))]
    # The agent's discovery: the host's devices, and the phones when enabled.
    names = [d.device_class.name for d in discover_local_devices(settings)]
    assert "pixel-8-pro-cpu-mid" in names and names[0].startswith("cpu-")
    assert not [d for d in discover_local_devices(settings.model_copy(update={"enabled": False})) if d.device_class.kind == "phone"]


def test_adb_errors_name_the_device_state(adb_server: str) -> None:
    adb = Adb(server_socket=adb_server, timeout_s=20)
    with pytest.raises(DeviceGone):
        adb.shell("127.0.0.1:1", "true")
    with pytest.raises(DeviceGone):
        adb.connect(f"127.0.0.1:{_free_port()}")


def test_bundle_runs_on_the_phone(adb_server: str, phone: AdbdStandin, bundle: tuple[Path, BundleManifest]) -> None:
    device = _device(phone_devices(_phone_settings(adb_server)), "pixel-8-pro-cpu-big")
    phone.heat("cpu-big", 60.0, cool_after_s=1.5)   # hot at the start: the first timed call waits
    before = dict(phone.governors())
    start = time.monotonic()
    results = _run(bundle, device, "run-1")
    elapsed = time.monotonic() - start

    for case in (GOOD, GOOD2):
        result = results[case_id(case)]
        assert result.status == "ok", result.reason
        assert result.correctness is not None and result.correctness.passed and result.correctness.max_abs_error < 1e-4
        assert result.stats is not None and len(result.samples) >= FAST.min_samples
        assert all(0 < s < 0.1 for s in result.samples)
        assert result.environment["cpu_mask"] == "100" and result.environment["governor"] == "performance"
    wrong = results[case_id(WRONG)]
    assert wrong.status == "wrong" and not wrong.samples
    assert wrong.correctness is not None and wrong.correctness.max_abs_error == pytest.approx(1.0, abs=1e-4)

    # No timed call started before the hot zone cooled; the wait is on the first case's record.
    benchmarks = [call for call in phone.shell_log if "--benchmark_format=json" in call.command]
    assert len(benchmarks) >= 2 and benchmarks[0].at >= phone.cooled_at["cpu-big"]
    waited = sum(float(results[case_id(c)].environment["cooldown_wait_s"]) for c in (GOOD, GOOD2))
    assert 0.1 <= waited < elapsed
    assert set(phone.taskset_masks()) == {"100"}   # the check runs and every timed call pinned to cpu8
    assert all(set(call.governors.values()) == {"performance"} for call in benchmarks)
    assert phone.governors() == before == {"policy0": "schedutil", "policy4": "schedutil", "policy8": "schedutil"}


def test_governors_restored_after_a_failing_case(adb_server: str, phone: AdbdStandin,
                                                 bundle: tuple[Path, BundleManifest]) -> None:
    _, manifest = bundle
    device = _device(phone_devices(_phone_settings(adb_server)), "pixel-8-pro-cpu-mid")
    failing = next(e for e in manifest.entries if e.case == case_id(GOOD2))
    assert failing.artifact is not None
    phone.fail_when(rf"cases/{failing.artifact.sha256[:16]}-.*iree-benchmark-module")
    results = _run(bundle, device, "run-2")

    assert results[case_id(GOOD)].status == "ok"
    broken = results[case_id(GOOD2)]
    assert broken.status == "error" and "made to fail" in (broken.reason or "")
    assert phone.failures and all(set(g.values()) == {"performance"} for _, g in phone.failures)
    assert set(phone.governors().values()) == {"schedutil"}
    assert phone.taskset_masks()[-1] == "f0"


def test_unrooted_phone_keeps_its_governor(adb_server: str, tmp_path: Path, bundle: tuple[Path, BundleManifest]) -> None:
    standin = _connect(adb_server, tmp_path / "fs", rooted=False, model="Galaxy S24", device="e1q")
    try:
        devices = phone_devices(_phone_settings(adb_server, clusters={}))
        device = next(d for d in devices if d.device_class.name == "galaxy-s24-cpu-big")
        results = _run(bundle, device, "run-3")
        good = results[case_id(GOOD)]
        assert good.status == "ok" and good.environment["governor"] == "unchanged (not rooted)"
        assert set(standin.governors().values()) == {"schedutil"}
        assert not [c for c in standin.shell_log if "scaling_governor" in c.command and "echo" in c.command]
    finally:
        Adb(server_socket=adb_server).disconnect(standin.serial)
        standin.stop()


def test_agent_runs_a_renamed_phone_class_on_the_phone(adb_server: str, phone: AdbdStandin, tmp_path: Path,
                                                       bundle: tuple[Path, BundleManifest]) -> None:
    """`agent.device_classes` renames a phone's class: the device keeps its adb transport, so the
    agent's executor runs the job on the phone, not with the host's IREE runtime."""
    from pipeline.agents.agent import DeviceAgent, Work, run_locally
    from pipeline.config import AgentSettings, Settings

    settings = Settings(home=tmp_path / "home", phones=_phone_settings(adb_server),
                        agent=AgentSettings(device_classes={"pixel-8-pro-cpu-big": "lab-pixel-big",
                                                            "pixel-8-pro-cpu-mid": ""}))
    agent = DeviceAgent(settings, name="phone-host")   # its own discovery: host devices and phones
    phones = [d for d in agent.discover().values() if d.device_class.kind == "phone"]
    assert [(d.device_class.name, d.info.device_class) for d in phones] == [("lab-pixel-big", "lab-pixel-big")]
    (renamed,) = phones
    assert renamed.transport == AdbTransport(phone.serial, "100")

    bundle_dir, manifest = bundle
    calls_before = len(phone.shell_log)
    document = run_locally(FAST)(Work(job_id="job-r", run_id="run-r", device=renamed, bundle_dir=bundle_dir,
                                      manifest=manifest), lambda *_: None)
    good = next(r for r in document.results if r.case == case_id(GOOD))
    assert good.status == "ok" and good.environment["cpu_mask"] == "100"
    # no profiler on phones yet: the result says so rather than nothing (pipeline.agents.counters)
    assert good.counters is None and good.environment["counters"] == \
        "not available: phones are not profiled yet (simpleperf over adb)"
    assert document.device.device_class == "lab-pixel-big"
    ran = [c for c in phone.shell_log[calls_before:] if "--benchmark_format=json" in c.command]
    assert ran, "nothing ran on the phone"
