"""End to end through the real `benchfarm` command: two commits of a suite, the second making one
kernel slower with a worse tile size; `benchfarm run` at each; the comparison flags exactly it.

The second run finds the first commit's bundle still under BENCHFARM_HOME and times head interleaved
with it (paired), so the verdict is the paired test's and the default 5% minimum change holds even on
a shared 2-core VM, where unpaired runs minutes apart had moved an unchanged case by up to ~10%."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from pipeline.agents.devices import cpu_device
from pipeline.config import CompareSettings
from pipeline.results.store.compare import compare
from pipeline.results.store.db import open_store, session_scope
from tests.helpers.cli_zygote import benchfarm_argv
from tests.helpers.suite_repo import GemmCase, case_id, commit_all, gemm_suite_files, make_suite_repo, write_files

pytestmark = pytest.mark.e2e

# Compute-bound shapes of 1-3 ms a call on one core: long enough to time, short enough for CI.
CASES = [GemmCase("alpha", 256, 256, 256), GemmCase("beta", 192, 256, 320), GemmCase("gamma", 320, 192, 256)]
SLOWED = "beta"



def benchfarm(home: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env["BENCHFARM_HOME"] = str(home)
    proc = subprocess.run([*benchfarm_argv(), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"benchfarm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def verdicts(stdout: str) -> dict[str, str]:
    """case id -> verdict, read from the printed table (one row per line on a pipe)."""
    found = {}
    for line in stdout.splitlines():
        match = re.search(r"(gemm/\S+)\s.*?(regressed|improved|similar|unchanged|insufficient data|errored|no baseline)", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def test_two_commits_flag_exactly_the_slowed_kernel(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, gemm_suite_files(CASES), name="suite-repo")
    home = tmp_path / "home"
    suite = str(repo / "kernels")

    first = benchfarm(home, "run", "--suite", suite, cwd=tmp_path)
    assert set(verdicts(first.stdout).values()) == {"no baseline"}, first.stdout

    slowed = [GemmCase(c.name, c.m, c.n, c.k, "slow" if c.name == SLOWED else "ok") for c in CASES]
    write_files(repo, gemm_suite_files(slowed))
    head = commit_all(repo, "gemm beta: try a 1x8 register tile")

    second = benchfarm(home, "run", "--suite", suite, cwd=tmp_path)
    assert head[:10] in second.stdout
    found = verdicts(second.stdout)
    # the kernels the commit did not touch were built into identical binaries: unchanged, not "similar"
    expected = {case_id(c): ("regressed" if c.name == SLOWED else "unchanged") for c in CASES}
    assert found == expected, second.stdout
    # the slowed kernel was still checked and found correct, so it was timed, not reported wrong
    assert "wrong" not in second.stdout
    assert "regressed: 1 regressed, 2 unchanged (same binary)" in second.stdout
    # the new tile changed the binary too: said beside the verdict, for that case alone
    compile_part = " ".join(second.stdout.split("compile statistics:")[-1].split())
    assert second.stdout.count("compile statistics:") == 1 and compile_part.startswith("1 case changed binary size")
    assert case_id(slowed[1]) in compile_part and case_id(CASES[0]) not in compile_part, second.stdout
    # the second run was timed paired with the first commit's bundle, and the verdict is the paired test's
    engine = open_store(f"sqlite:///{home / 'benchfarm.db'}")
    with session_scope(engine) as session:
        comparison = compare(session, repository="suite-repo", head_sha=head, device_class=cpu_device().device_class.name,
                             settings=CompareSettings())
    engine.dispose()
    assert comparison.base_source == "paired" and all(r.paired for r in comparison.rows), comparison
    slowed = next(r for r in comparison.rows if r.status == "regressed")
    assert slowed.ci_low is not None and slowed.ci_high is not None and 0 < slowed.ci_low <= slowed.change <= slowed.ci_high
    assert all(r.same_binary for r in comparison.rows if r.status == "unchanged")

    # a commit that edits only a README: every case is the same binary, so every row says so
    (repo / "README.md").write_text("notes, no kernel change\n")
    readme = commit_all(repo, "docs: a README")
    third = benchfarm(home, "run", "--suite", suite, cwd=tmp_path)
    assert readme[:10] in third.stdout
    assert set(verdicts(third.stdout).values()) == {"unchanged"}, third.stdout
    assert "regressed" not in third.stdout.split("Verdict")[-1] and "unchanged (same binary)" in third.stdout
    assert "compile statistics" not in third.stdout   # nothing compiled differently
