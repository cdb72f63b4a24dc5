"""Issue 30, end to end on the CPU: a head whose timing rounds a CPU burner made noisy is reported
inconclusive, never similar, by the comparison, the PR comment's headline and the check.

Two commits of a one-case IREE suite whose binaries are identical (a README edit), judged by their
timings (the identical-binary shortcut off, as an A/A would), unpaired: the base timed on a quiet
host, the head with busy processes started before its second and fourth rounds and stopped after
them. The head's rounds then disagree by far more than the case's threshold, so its interval can
neither show a change nor fit inside +-threshold: a loaded CPU made a `similar` of this before
(`+34.8 % [-33.3, +172.4]`, issue 30).

The device runs IREE's `local-task` driver, whose calls are timed by the wall clock: on the CPU
default, `local-sync`, a sample is the calling thread's CPU time, which the burner's time slices do not
enter (`iree_runner`), so it cannot make those rounds noisy."""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.synchronize
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.agents.devices import LocalDevice
from pipeline.agents.local import run_bundle
from pipeline.build.bundle import build_bundle
from pipeline.build.suite_loader import locate_suite, resolve_commit
from pipeline.config import MeasurementSettings, load_settings
from pipeline.contracts import BundleManifest, ResultDocument
from pipeline.pr_comments.report import report_for_commit
from pipeline.results.store.compare import compare
from pipeline.results.store.db import open_store, session_scope
from tests.helpers.cpu import x86_64_cpu
from tests.helpers.stores import store_local_run
from tests.helpers.suite_repo import GemmCase, case_id, commit_all, gemm_suite_files, make_suite_repo, write_files

pytestmark = pytest.mark.e2e

CASE = GemmCase("alpha", 768, 768, 768)   # ~10 ms a call: a sample spans several of the scheduler's time slices
ROUNDS = 4
SETTINGS = MeasurementSettings(warmup_s=0.02, min_samples=20, min_time_s=0.4, max_time_s=2.0, rounds=ROUNDS,
                               min_rounds=ROUNDS, device_overrides={}, host_lock="")


def _spin(burn: multiprocessing.synchronize.Event, ready: multiprocessing.synchronize.Semaphore, core: int) -> None:
    os.sched_setaffinity(0, {core})
    ready.release()
    while True:
        burn.wait()
        while burn.is_set():
            sum(range(10_000))


class _Burner:
    """Busy processes, `per_core` pinned to each core this process may use, started once (a process
    takes longer to start than a round lasts) and spinning only while `on`: whatever else runs gets a
    share of every core (IREE pins its own worker threads, so burning some cores can miss them)."""

    def __init__(self, per_core: int) -> None:
        cores = sorted(os.sched_getaffinity(0)) * per_core
        context = multiprocessing.get_context("spawn")
        self.burn = context.Event()
        ready = context.Semaphore(0)
        self.workers = [context.Process(target=_spin, args=(self.burn, ready, core), daemon=True) for core in cores]
        for worker in self.workers:
            worker.start()
        for _ in self.workers:
            if not ready.acquire(timeout=60):
                raise RuntimeError("a burner process did not start")

    def on(self) -> None:
        self.burn.set()

    def off(self) -> None:
        self.burn.clear()

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()
            worker.join()


def _timed(bundle: tuple[Path, BundleManifest], device: LocalDevice, run_id: str, *, burn_rounds: set[int]
           ) -> ResultDocument:
    """The bundle timed unpaired, with the CPU burned through the rounds in `burn_rounds` (from 2 on):
    the burner starts when the round before reports, and stops when its own round reports."""
    if 1 in burn_rounds:
        raise ValueError("the first round starts before any progress; burn later rounds")
    bundle_dir, manifest = bundle
    # four a core: beside other load (the test suite's other process, two burners of the loaded runs) the
    # quiet rounds already share each core, and two a core slowed the burned ones by only 1.24x there
    burner = _Burner(per_core=4)
    rounds_done = 0

    def progress(description: str, *_: int) -> None:
        nonlocal rounds_done
        if not description.startswith("timing: round"):
            return
        rounds_done += 1
        burner.off()
        if rounds_done + 1 in burn_rounds:
            burner.on()

    try:
        return run_bundle(bundle_dir=bundle_dir, manifest=manifest, device=device, run_id=run_id, job_id="j",
                          settings=SETTINGS, progress=progress)
    finally:
        burner.close()


def test_a_head_timed_under_a_cpu_burner_is_inconclusive_in_the_comparison_the_comment_and_the_check(
    tmp_path: Path,
) -> None:
    cpu = x86_64_cpu()
    device = dataclasses.replace(cpu, device_class=cpu.device_class.model_copy(update={"hal_driver": "local-task"}))
    repo = make_suite_repo(tmp_path, gemm_suite_files([CASE]))
    location = locate_suite(repo / "kernels")

    def build(sha: str) -> tuple[Path, BundleManifest]:
        return build_bundle(location=location, sha=sha, targets=["llvm-cpu:x86_64"], out_dir=tmp_path / "bundles",
                            cache_dir=tmp_path / "cache", workers=1)

    base = build(resolve_commit(location))
    write_files(repo, {"README.md": "an edit that changes no kernel\n"})
    head = build(commit_all(repo, "readme"))
    quiet = _timed(base, device, "r-base", burn_rounds=set())
    noisy = _timed(head, device, "r-head", burn_rounds={2, 4})
    [head_result] = noisy.results
    assert head_result.rounds is not None and len(head_result.rounds) == ROUNDS
    levels = [sorted(head_result.samples[sum(head_result.rounds[:i]):sum(head_result.rounds[:i + 1])])
              for i in range(ROUNDS)]
    medians = [level[len(level) // 2] for level in levels]
    # the burner did its part: the burned rounds are slower than the quietest one (else this test proves
    # nothing). Not than every unburned one: on a loaded machine (the other test processes, two more burners:
    # bench/loaded_e2e.py) an unburned round was once slowed too, to 1.49x the quietest
    assert min(medians[1], medians[3]) > 1.5 * min(medians[0], medians[2]), medians

    engine = open_store(f"sqlite:///{tmp_path}/store.db")
    for document, (bundle_dir, manifest) in ((quiet, base), (noisy, head)):
        store_local_run(engine, repo / "kernels", document, device, manifest, bundle_dir)

    settings = load_settings(public_url="http://bf.example", compare={"same_binary_shortcut": False})
    with session_scope(engine) as session:
        comparison = compare(session, repository=head[1].repository, head_sha=head[1].commit,
                             device_class=device.device_class.name, settings=settings.compare)
        report = report_for_commit(session, settings=settings, repository=head[1].repository, sha=head[1].commit,
                                   pr=7)
    [row] = comparison.rows
    assert str(row.case_id) == case_id(CASE) and row.same_binary and not row.paired
    assert row.status == "inconclusive", row
    assert row.ci_low is not None and row.ci_high is not None and row.threshold is not None
    assert row.ci_low < -row.threshold or row.ci_high > row.threshold, "an interval inside the band is a same"
    assert comparison.verdict == "inconclusive"
    assert report.title.startswith("inconclusive: 1 inconclusive"), report.title
    assert report.conclusion == "neutral"
    assert "### benchfarm: inconclusive: 1 inconclusive" in report.body
    assert "#### Inconclusive (1)" in report.body
    assert "more rounds" in report.body and "quieter device" in report.body
    assert "similar" not in report.body.split("<sub>")[0], "nothing above the footer calls it similar"


@pytest.fixture(autouse=True)
def _no_stray_burners() -> Iterator[None]:
    yield
    for child in multiprocessing.active_children():
        child.kill()
