"""A kernel edit not committed yet, as a newcomer makes it: `benchfarm run` in the checkout (no
--suite) benchmarks that checkout's HEAD and names the uncommitted files; `--worktree` benchmarks
the working tree as a commit of its own on top of HEAD, labelled as such. The suite also has a case
for another machine's target (cuda:sm_90): said not built or run here, named when edited, and a
`--cases` that selects only such cases is refused before anything is stored."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pipeline.results.store.db import open_store, session_scope
from pipeline.results.store.models import Commit, Run
from tests.helpers.cli_zygote import benchfarm_argv
from tests.helpers.suite_repo import GemmCase, case_id, gemm_suite_files, git, make_suite_repo, write_files

pytestmark = pytest.mark.e2e

FAST = {"BENCHFARM_MEASUREMENT__WARMUP_S": "0", "BENCHFARM_MEASUREMENT__MIN_TIME_S": "0",
        "BENCHFARM_MEASUREMENT__MIN_SAMPLES": "3", "BENCHFARM_MEASUREMENT__MAX_TIME_S": "1",
        "BENCHFARM_MEASUREMENT__ROUNDS": "3"}  # a verdict needs 3 rounds


def benchfarm(home: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env.update(BENCHFARM_HOME=str(home), **FAST)
    return subprocess.run([*benchfarm_argv(), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_run_names_uncommitted_edits_and_worktree_runs_them(tmp_path: Path) -> None:
    kept, added = GemmCase("kept"), GemmCase("added", m=4)
    gpu = GemmCase("gpu-only", targets=("cuda:sm_90",))      # another machine's: this one has no GPU
    repo = make_suite_repo(tmp_path, gemm_suite_files([kept, gpu]), name="suite-repo")
    head = git(repo, "rev-parse", "HEAD")
    write_files(repo, gemm_suite_files([kept, added, gpu]))  # the edit, not committed
    home = tmp_path / "home"

    plain = benchfarm(home, "run", cwd=repo / "kernels")     # no --suite: the checkout we are in
    assert plain.returncode == 0, plain.stderr
    assert "kernels/__init__.py (modified)" in plain.stderr and "--worktree" in plain.stderr, plain.stderr
    assert f"suite-repo@{head[:10]}" in plain.stdout
    assert case_id(kept) in plain.stdout and case_id(added) not in plain.stdout
    said = " ".join(plain.stdout.split())   # as one line: the console wraps at its width
    assert "not built or run here: 1 case for targets no device here runs: 1 gemm/*/iree (cuda:sm_90)" in said, said
    assert "benchfarm build --targets cuda:sm_90" in said and "files changed since" not in said, plain.stdout

    def runs() -> int:
        engine = open_store(f"sqlite:///{home / 'benchfarm.db'}")
        with session_scope(engine) as session:
            count = session.query(Run).count()
        engine.dispose()
        return count

    stored = runs()
    # only cases for another target: refused before anything is stored, naming them and their target
    elsewhere = benchfarm(home, "run", "--cases", "gemm/gpu-*", cwd=repo)
    refusal = " ".join(elsewhere.stderr.split())
    assert elsewhere.returncode == 1 and "traceback" not in elsewhere.stderr.lower(), elsewhere.stderr
    assert "--cases 'gemm/gpu-*' selects 1 case, none for this machine's targets" in refusal, refusal
    assert f"they are for cuda:sm_90 ({case_id(gpu)})" in refusal, refusal
    assert runs() == stored

    worktree = benchfarm(home, "run", "--worktree", cwd=repo)
    assert worktree.returncode == 0, worktree.stderr
    assert "working tree" in worktree.stderr, worktree.stderr
    assert case_id(added) in worktree.stdout and case_id(kept) in worktree.stdout
    assert git(repo, "rev-parse", "HEAD") == head and git(repo, "status", "--porcelain") == "M kernels/__init__.py"
    engine = open_store(f"sqlite:///{home / 'benchfarm.db'}")
    with session_scope(engine) as session:
        newest = session.query(Commit).order_by(Commit.id.desc()).first()
        assert newest is not None and [p.parent_sha for p in newest.parents] == [head]
        assert newest.message.startswith("benchfarm: working tree of kernels/ on top of")
        session.expunge(newest)
    engine.dispose()

    refused = benchfarm(home, "run", "--worktree", "--ref", "HEAD~0", cwd=repo)
    assert refused.returncode == 1 and "--worktree" in refused.stderr and "Traceback" not in refused.stderr

    # only the edited kernel, again: --cases
    only = benchfarm(home, "run", "--worktree", "--cases", "gemm/added/*", cwd=repo)
    assert only.returncode == 0, only.stderr
    assert case_id(added) in only.stdout and case_id(kept) not in only.stdout, only.stdout
    stored = runs()
    none = benchfarm(home, "run", "--cases", "conv/*", cwd=repo)
    assert none.returncode == 1 and "--cases 'conv/*' selects none of the 2 cases" in none.stderr, none.stderr
    assert runs() == stored   # refused, not stored as a failed run

    # the stored results of HEAD and of the working-tree commit, compared: three formats
    wt = newest.sha
    table = benchfarm(home, "compare", "HEAD", wt, cwd=repo)
    assert table.returncode == 0 and case_id(kept) in table.stdout, table.stderr
    data = json.loads(benchfarm(home, "compare", head[:10], wt, "--format", "json", cwd=repo).stdout)
    (comparison,) = data["comparisons"]
    assert (comparison["base_sha"], comparison["head_sha"]) == (head, wt)
    assert {r["case_id"]: r["status"] for r in comparison["rows"]}[case_id(added)] == "no baseline"
    markdown = benchfarm(home, "compare", "HEAD", wt, "--format", "markdown", cwd=repo).stdout
    assert "| " in markdown and head[:7] in markdown, markdown

    # the edit committed and run whole, then `--cases` again on that commit: the table shows the case
    # this run ran, not the commit's other case from the earlier run
    # (the commit edits the GPU case too: named as edited, and still not run here)
    write_files(repo, gemm_suite_files([kept, added, GemmCase(gpu.name, variant="slow", targets=gpu.targets)]))
    git(repo, "commit", "-qam", "gemm: add a case")
    whole = benchfarm(home, "run", cwd=repo)
    assert whole.returncode == 0, whole.stderr
    said = " ".join(whole.stdout.split())
    assert f"(cuda:sm_90) 1 of them has files changed since {head[:10]} (the base): {case_id(gpu)}" in said, said
    again = benchfarm(home, "run", "--cases", "gemm/added/*", cwd=repo)
    assert again.returncode == 0, again.stderr
    assert case_id(added) in again.stdout and case_id(kept) not in again.stdout, again.stdout
    assert "not built or run here" not in again.stdout   # --cases selects no case of another target
