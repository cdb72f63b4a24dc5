"""Hardware counters on the agent (`pipeline.agents.counters`): ncu's CSV, the cache, and the CPU path
through run_bundle on a real IREE bundle (perf events where this host's kernel allows them, else the
result saying why not)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.agents.counters import (
    TASK_CLOCK,
    CounterCache,
    CountersUnavailable,
    PerfEventProfiler,
    parse_ncu_csv,
)
from pipeline.agents.devices import LocalDevice
from pipeline.agents.local import run_bundle
from pipeline.build.bundle import build_bundle
from pipeline.build.suite_loader import locate_suite, resolve_commit
from pipeline.config import MeasurementSettings
from pipeline.contracts import BundleManifest, parse_result
from pipeline.contracts.counters import COUNTERS, COUNTERS_KEY, HardwareCounters
from tests.helpers.cpu import x86_64_cpu
from tests.helpers.suite_repo import (
    GemmCase,
    case_id,
    gemm_suite_files,
    make_suite_repo,
)

FAST = MeasurementSettings(warmup_s=0.0, min_samples=5, min_time_s=0.0, max_time_s=0.2, rounds=2,
                           min_rounds=2)
GOOD, WRONG = GemmCase("good"), GemmCase("wrong", variant="wrong")

# What `ncu --clock-control none --metrics <NCU_METRICS> --csv --print-units base` prints over a process that
# launched two kernels. Its shape is that of real captures kept in public repositories' tests (the ncu CSV
# of microsoft/superbenchmark's cuBLASLt benchmark test, and a trimmed `--metrics` capture of a Go ncu
# wrapper's tests): ncu's ==PROF== lines and the application's own output ahead of one table; one row per
# launch and metric, section "Command line profiler metrics" under --metrics; integers with thousands
# separators. No GPU here to capture one: the values are made up around the design notes' H200 reading
# (2,260,992 instructions, 50.36 MB of DRAM reads for one kernel); the GPU test parses a real run.
ROW = '"{id}","4242","python3.12","127.0.0.1","matmul_kernel","1","13","(128, 1, 1)","(512, 1, 1)","0","9.0",' \
      '"Command line profiler metrics","{metric}","{unit}","{value}"'
NCU_OUTPUT = "\n".join([
    "==PROF== Connected to process 4242 (/usr/bin/python3.12)",
    '==PROF== Profiling "matmul_kernel" - 0: 0%....50%....100% - 3 passes',
    "some line the application printed",
    '==PROF== Profiling "matmul_kernel" - 1: 0%....50%....100% - 3 passes',
    "==PROF== Disconnected from process 4242",
    ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device",'
     '"CC","Section Name","Metric Name","Metric Unit","Metric Value"'),
    *(ROW.format(id=launch, metric=metric, unit=unit, value=value) for launch, values in enumerate([
        [("dram__bytes_read.sum", "byte", "50,364,416"), ("dram__bytes_write.sum", "byte", "8,388,608"),
         ("lts__t_sector_hit_rate.pct", "%", "61.42"),
         ("sm__warps_active.avg.pct_of_peak_sustained_active", "%", "12.49"),
         ("smsp__inst_executed.sum", "inst", "2,260,992")],
        [("dram__bytes_read.sum", "byte", "1,048,576"), ("dram__bytes_write.sum", "byte", "0"),
         ("lts__t_sector_hit_rate.pct", "%", "0"), ("sm__warps_active.avg.pct_of_peak_sustained_active", "%", "7.81"),
         ("smsp__inst_executed.sum", "inst", "98,304")]]) for metric, unit, value in values),
]) + "\n"
# Sections and rules (ncu 2025 with `--section`): five more columns, rows with a trailing comma where they are
# empty, rule rows with no metric (the superbenchmark capture's shape); only our metrics are read.
WITH_RULES = "\n".join(
    line + "," if line.startswith(('"0"', '"1"')) else line.replace(
        '"Metric Value"', '"Metric Value","Rule Name","Rule Type","Rule Description","Estimated Speedup Type",'
        '"Estimated Speedup"') for line in NCU_OUTPUT.splitlines()
) + "\n" + ROW.format(id=1, metric="", unit="", value="") + ',"SOLBottleneck","OPT","low compute throughput","",""\n'


def test_ncu_csv_gives_each_launch_its_counters_in_order() -> None:
    first, second = parse_ncu_csv(NCU_OUTPUT)
    assert first.kernel == second.kernel == "matmul_kernel"
    assert first.values == {"instructions": 2_260_992.0, "dram_read_bytes": 50_364_416.0,
                            "dram_write_bytes": 8_388_608.0, "l2_hit_rate": 61.42, "achieved_occupancy": 12.49}
    assert second.values["instructions"] == 98_304.0 and second.values["dram_write_bytes"] == 0.0
    assert parse_ncu_csv(WITH_RULES) == [first, second]


@pytest.mark.parametrize(("text", "problem"), [
    ("==PROF== ERR_NVGPUCTRPERM - The user does not have permission\n", "no ncu CSV header"),
    ("\n".join(line for line in NCU_OUTPUT.splitlines() if "dram__bytes_write" not in line or '"1"' not in line[:4]),
     "did not report dram__bytes_write.sum of launch 1"),
    (NCU_OUTPUT.replace('"2,260,992"', '"n/a"'), "smsp__inst_executed.sum of launch 0 is 'n/a', not a number"),
    (NCU_OUTPUT.replace('"ID","Process', '"Launch","Process'), "no ncu CSV header"),
])
def test_ncu_csv_that_cannot_be_read_says_why(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_ncu_csv(text)


def test_counter_cache_keys_on_binary_and_device_class(tmp_path: Path, bundle: tuple[Path, BundleManifest]) -> None:
    _, manifest = bundle
    entry = next(e for e in manifest.entries if e.case == case_id(GOOD))
    cache = CounterCache(tmp_path / "counters")
    counters = HardwareCounters(profiler="ncu 2025.3.1.0", values={"instructions": 5.0})
    assert cache.get(entry, "nvidia-h100") is None
    cache.put(entry, "nvidia-h100", counters)
    assert cache.get(entry, "nvidia-h100") == counters
    assert cache.get(entry, "nvidia-h200") is None   # another device class counts on its own
    # a kernel renamed (another binary, the same code) is not profiled again; other code is
    assert entry.code_digest() is not None and entry.launch is not None and entry.artifact is not None
    renamed = entry.model_copy(update={"launch": entry.launch.model_copy(update={"entry_point": "renamed"}),
                                       "artifact": entry.artifact.model_copy(update={"sha256": "0" * 64})})
    assert renamed.binary_digest() != entry.binary_digest() and cache.get(renamed, "nvidia-h100") == counters
    other = entry.model_copy(update={"tensors": entry.tensors[::-1]})
    assert cache.get(other, "nvidia-h100") is None
    (next((tmp_path / "counters").glob("*.json"))).write_text("{not json")
    assert cache.get(entry, "nvidia-h100") is None   # a corrupt file reads as a miss


@pytest.fixture(scope="module")
def device() -> LocalDevice:
    return x86_64_cpu()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, BundleManifest]:
    tmp = tmp_path_factory.mktemp("bundle")
    repo = make_suite_repo(tmp, gemm_suite_files([GOOD, WRONG]))
    location = locate_suite(repo / "kernels")
    return build_bundle(location=location, sha=resolve_commit(location), targets=["llvm-cpu:x86_64"],
                        out_dir=tmp / "bundles", cache_dir=tmp / "cache", workers=2)


def _perf_events() -> str | None:
    """None where this host lets a process count its own instructions, else the refusal run_bundle reports."""
    try:
        PerfEventProfiler.open().close()
    except CountersUnavailable as exc:
        return str(exc)
    return None


def test_perf_events_count_what_runs_between_enable_and_disable() -> None:
    """The perf_event_open machinery (attribute layout, ioctls, the read with its enabled and running
    times) on a software counter every Linux kernel has: this host may have no PMU for instructions."""
    paranoid = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
    if paranoid > 2 and os.geteuid() != 0:   # Debian's default 3: no perf event for an unprivileged process
        with pytest.raises(CountersUnavailable, match=f"refused: perf_event_open: E(ACCES|PERM) "
                                                      rf"\(kernel.perf_event_paranoid={paranoid};"):
            PerfEventProfiler.open(TASK_CLOCK)
        return
    clock = PerfEventProfiler.open(TASK_CLOCK)
    try:
        busy = clock.count(lambda: sum(range(2_000_000)))   # tens of milliseconds of this thread
        idle = clock.count(lambda: None)
    finally:
        clock.close()
    assert busy > 1_000_000 > idle >= 0   # nanoseconds


def test_cpu_counters_are_taken_once_per_binary_or_the_result_says_why_not(
        bundle: tuple[Path, BundleManifest], device: LocalDevice, tmp_path: Path) -> None:
    bundle_dir, manifest = bundle
    cache = CounterCache(tmp_path / "counters")
    documents = [parse_result(run_bundle(bundle_dir=bundle_dir, manifest=manifest, device=device, run_id=f"run-{i}",
                                         job_id="job-1", settings=FAST, counter_cache=cache).model_dump_json())
                 for i in (1, 2)]
    first, second = ({r.case: r for r in d.results} for d in documents)
    good = first[case_id(GOOD)]
    assert first[case_id(WRONG)].status == "wrong" and first[case_id(WRONG)].counters is None
    refused = _perf_events()
    if refused is None:   # counted: instructions of one call, kept for the next job
        assert good.counters is not None and good.counters.values["instructions"] > 10_000
        assert good.counters.profiler.startswith("perf_event_open")
        assert good.environment[COUNTERS_KEY].endswith("one launch on the check's inputs, clocks unchanged")
        assert second[case_id(GOOD)].counters == good.counters
        assert "counter cache" in second[case_id(GOOD)].environment[COUNTERS_KEY]
        assert [d.environment["counters_taken"] for d in documents] == ["1", "0"]
        assert [d.environment["counters_reused"] for d in documents] == ["0", "1"]
    else:   # refused here: every measured result says so, in the words of the probe, and nothing is kept
        assert refused.startswith(("refused: perf_event_open", "not available: perf_event_open"))
        assert good.counters is None and good.environment[COUNTERS_KEY] == refused
        assert second[case_id(GOOD)].environment[COUNTERS_KEY] == refused
        assert [d.environment["counters_taken"] for d in documents] == ["0", "0"]
        assert not list(cache.folder.glob("*.json"))


def test_counters_off_is_said_on_every_measured_result(bundle: tuple[Path, BundleManifest], device: LocalDevice,
                                                       tmp_path: Path) -> None:
    bundle_dir, manifest = bundle
    off = FAST.model_copy(update={"device_overrides": {"cpu": {"counters": "off"}}})
    document = run_bundle(bundle_dir=bundle_dir, manifest=manifest, device=device, run_id="run-off", job_id="job-1",
                          settings=off, counter_cache=CounterCache(tmp_path / "counters"))
    good = next(r for r in document.results if r.case == case_id(GOOD))
    assert good.status == "ok" and good.counters is None
    assert good.environment[COUNTERS_KEY] == "off (measurement setting counters)"
    assert not (tmp_path / "counters").exists()


# ---- on an NVIDIA GPU with Nsight Compute (`-m gpu`; skipped cleanly elsewhere) ---------------------

@pytest.fixture(scope="module")
def gpu_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalDevice, Path, BundleManifest]:
    from tests.agents.test_cuda_runner import _nvidia_device
    from tests.helpers.triton_suite import TritonCase, triton_suite_files

    gpu = _nvidia_device()
    pytest.importorskip("triton", reason="building the test bundle needs Triton on this host")
    tmp = tmp_path_factory.mktemp("cuda")
    repo = make_suite_repo(tmp, triton_suite_files([TritonCase("small"), TritonCase("tall", m=1024)]))
    location = locate_suite(repo / "kernels")
    bundle_dir, manifest = build_bundle(location=location, sha=resolve_commit(location), targets=["cuda:sm_90"],
                                        out_dir=tmp / "bundles", cache_dir=tmp / "cache", workers=2)
    return gpu, bundle_dir, manifest


@pytest.mark.gpu
def test_ncu_counts_each_binary_once_and_the_same_every_time(gpu_bundle: tuple[LocalDevice, Path, BundleManifest],
                                                             tmp_path: Path) -> None:
    from pipeline.agents.counters import CounterRequest, NcuProfiler
    from tests.helpers.triton_suite import TritonCase, triton_case_id

    device, bundle_dir, manifest = gpu_bundle
    small, tall = (next(e for e in manifest.entries if e.case == triton_case_id(case))
                   for case in (TritonCase("small"), TritonCase("tall", m=1024)))   # as gpu_bundle builds them
    ncu = NcuProfiler.find(device.info.uid, timeout_s=300)
    # two processes, other inputs (seeds): the same instructions, DRAM bytes within their tolerance (an H200
    # read 273,408 and 273,152 bytes of one launch in two processes: L2 replacement is not deterministic);
    # a 4x taller GEMM counts more
    first, second = ([ncu.collect_many([CounterRequest(bundle_dir, e, seed) for e in (small, tall)])
                      for seed in (1, 2)])
    for got in (*first, *second):
        assert isinstance(got, HardwareCounters), got
    for a, b in zip(first, second, strict=True):
        assert isinstance(a, HardwareCounters) and isinstance(b, HardwareCounters)
        assert a.values["instructions"] == b.values["instructions"]
        for name in ("dram_read_bytes", "dram_write_bytes"):
            assert abs(a.values[name] - b.values[name]) <= COUNTERS[name].relative_tolerance * a.values[name], name
    small_counts, tall_counts = first
    assert isinstance(small_counts, HardwareCounters) and isinstance(tall_counts, HardwareCounters)
    assert tall_counts.values["instructions"] > 3 * small_counts.values["instructions"] > 0
    assert small_counts.values["dram_read_bytes"] > 0 and 0 <= small_counts.values["l2_hit_rate"] <= 100

    # through run_bundle: every ok result carries them, a second job reuses them
    cache = CounterCache(tmp_path / "counters")
    fast = MeasurementSettings(warmup_s=0.01, min_samples=5, min_time_s=0.0, max_time_s=0.2,
                               rounds=2, min_rounds=2, device_overrides={})
    documents = [run_bundle(bundle_dir=bundle_dir, manifest=manifest, device=device, run_id=f"gpu-{i}",
                            job_id="job-1", settings=fast, counter_cache=cache) for i in (1, 2)]
    for document in documents:
        for r in document.results:
            assert r.status == "ok" and r.counters is not None, (r.reason, r.environment.get(COUNTERS_KEY))
    assert [d.environment["counters_taken"] for d in documents] == ["2", "0"]
    ran = {r.case: r.counters for r in documents[0].results}
    assert ran[small.case] is not None and ran[small.case].values["instructions"] == small_counts.values["instructions"]


STAND_IN_NCU = """#!/bin/sh
# A stand-in for Nsight Compute, which needs an NVIDIA GPU: its version line, else the application
# run as ncu would run it (options skipped), without profiling anything.
if [ "$1" = "--version" ]; then echo "Version 2099.1.0.0 (build 1)"; exit 0; fi
while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do if [ "$1" = "--csv" ]; then shift; else shift 2; fi; done
exec "$@"
"""


def test_a_launch_that_cannot_be_profiled_says_why(bundle: tuple[Path, BundleManifest], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """ncu's child (`pipeline.agents.runners.cuda_launch`, really run) fails on a host without CUDA, or on
    an entry that is not a cubin: each binary's reason says so, with the child's own words."""
    from pipeline.agents.counters import CounterRequest, NcuProfiler

    (tmp_path / "ncu").write_text(STAND_IN_NCU)
    (tmp_path / "ncu").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    bundle_dir, manifest = bundle
    ncu = NcuProfiler.find(None, timeout_s=120)
    assert ncu.name == "ncu 2099.1.0.0"
    entry = next(e for e in manifest.entries if e.case == case_id(GOOD))
    (got,) = ncu.collect_many([CounterRequest(bundle_dir, entry, 1)])
    assert isinstance(got, CountersUnavailable)
    if "cuda_launch: " in str(got):   # no CUDA here: the child's own last words, after ncu's missing table
        assert str(got).startswith("failed: no ncu CSV header")
    else:   # a GPU host: the child says why this entry (an IREE module) was not launched
        assert str(got).startswith("failed: ValueError: entry") and "no CUDA launch description" in str(got)
