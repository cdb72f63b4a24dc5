"""Issue 31, "a history that never rewrites itself", through the real `benchfarm run` on SQLite and
PostgreSQL, read back through the service's API: every run keeps its own results, history follows
ancestry (never commit times), each case is compared with the nearest ancestor that has it, and a
working-tree commit stays out of the branch's history."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from statistics import median
from typing import Any

import pytest
import requests

from pipeline.results.analysis import changepoints
from pipeline.config import Settings
from pipeline.service.app import create_app
from pipeline.results.store.db import open_store
from tests.helpers.cli_zygote import benchfarm_argv
from tests.helpers.live_server import live_server
from tests.helpers.stores import database_url  # noqa: F401  (the fixture: SQLite and PostgreSQL)
from tests.helpers.suite_repo import (
    GemmCase,
    case_id,
    commit_all,
    gemm_suite_files,
    git,
    make_suite_repo,
    write_files,
)

pytestmark = pytest.mark.e2e

FAST = {"BENCHFARM_MEASUREMENT__WARMUP_S": "0", "BENCHFARM_MEASUREMENT__MIN_TIME_S": "0",
        "BENCHFARM_MEASUREMENT__MIN_SAMPLES": "3", "BENCHFARM_MEASUREMENT__MAX_TIME_S": "1",
        "BENCHFARM_MEASUREMENT__ROUNDS": "3"}  # a verdict needs 3 rounds
CASES = [GemmCase("alpha", 32, 32, 32), GemmCase("beta", 16, 32, 48)]


def benchfarm(tmp_path: Path, url: str, *args: str, cwd: Path | None = None, **env_extra: str) -> str:
    """Runs `benchfarm ARGS` on the store at `url`; returns its stdout (a failure fails the test)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env.update(BENCHFARM_HOME=str(tmp_path / "home"), BENCHFARM_DATABASE_URL=url, **FAST, **env_extra)
    proc = subprocess.run([*benchfarm_argv(), *args], cwd=cwd or tmp_path, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"benchfarm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def run_id(stdout: str) -> str:
    found = re.search(r"^run (\S+) of ", stdout, re.MULTILINE)
    assert found, stdout
    return found.group(1)


@contextmanager
def api(tmp_path: Path, url: str) -> Iterator[Any]:
    """`get(PATH)`: the JSON of /api/v1/PATH, or the text of a page (`get(PATH, page=True)`)."""
    engine = open_store(url)
    try:
        with live_server(create_app(Settings(home=tmp_path / "service", database_url=url), engine)) as base:
            def get(path: str, *, page: bool = False) -> Any:
                response = requests.get(f"{base}{'' if page else '/api/v1'}{path}", timeout=60)
                assert response.status_code == 200, (path, response.text)
                return response.text if page else response.json()
            yield get
    finally:
        engine.dispose()


def run_medians(get: Any, run: str) -> dict[str, float]:
    """case id -> the head median the run's API shows."""
    return {r["case_id"]: r["head_median"] for c in get(f"/runs/{run}")["comparisons"] for r in c["rows"]}


def job_medians(get: Any, run: str) -> dict[str, float]:
    """case id -> the median the run's job stored."""
    job, = get(f"/runs/{run}")["jobs"]
    return {r["case_id"]: r["median"] for r in get(f"/jobs/{job['id']}/results")["results"] if r["median"]}


def series_of(get: Any, case: str) -> dict[str, Any]:
    found, = [s for s in get("/series") if s["case_id"] == case]
    return get(f"/series/{found['id']}")


def test_a_second_run_of_a_commit_adds_to_its_history_and_leaves_the_first_run_as_it_was(
        tmp_path: Path, database_url: str) -> None:  # noqa: F811
    repo = make_suite_repo(tmp_path, gemm_suite_files(CASES), name="suite-repo")
    suite = str(repo / "kernels")
    alpha = case_id(CASES[0])
    first = run_id(benchfarm(tmp_path, database_url, "run", "--suite", suite, "--cases", "gemm/alpha*"))
    with api(tmp_path, database_url) as get:
        first_api, first_page = get(f"/runs/{first}"), get(f"/runs/{first}", page=True)
    second = run_id(benchfarm(tmp_path, database_url, "run", "--suite", suite, "--cases", "gemm/alpha*"))

    with api(tmp_path, database_url) as get:
        assert get(f"/runs/{first}") == first_api
        assert get(f"/runs/{first}", page=True) == first_page
        levels = [job_medians(get, first)[alpha], job_medians(get, second)[alpha]]
        assert levels[0] != levels[1]   # two timings of one binary never agree to the last bit
        assert run_medians(get, first) == {alpha: levels[0]}
        assert run_medians(get, second) == {alpha: levels[1]}
        point, = series_of(get, alpha)["history"]
        assert point["runs"] == 2 and point["median"] == pytest.approx(median(levels))
        assert series_of(get, alpha)["latest_median"] == pytest.approx(median(levels))


def rows(get: Any, run: str) -> dict[str, dict[str, Any]]:
    comparison, = get(f"/runs/{run}")["comparisons"]
    return {r["case_id"]: {**r, "base": comparison.get("case_bases", {}).get(r["case_id"], comparison["base_sha"])}
            for r in comparison["rows"]}


def test_a_partial_run_is_the_base_only_of_the_cases_it_ran(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    # unpaired: a paired run times every case against the base's bundle (it holds the whole suite)
    cases = [*CASES, GemmCase("gamma", 24, 16, 32)]
    repo = make_suite_repo(tmp_path, gemm_suite_files(cases), name="suite-repo")
    suite = str(repo / "kernels")
    flags = ["--unpaired"]
    first = git(repo, "rev-parse", "HEAD")
    benchfarm(tmp_path, database_url, "run", "--suite", suite, *flags)
    partial = commit_all(repo, "second")
    benchfarm(tmp_path, database_url, "run", "--suite", suite, "--cases", "gemm/alpha*", *flags)
    commit_all(repo, "third")
    full = run_id(benchfarm(tmp_path, database_url, "run", "--suite", suite, *flags))

    with api(tmp_path, database_url) as get:
        found = rows(get, full)
    alpha = case_id(cases[0])
    assert set(found) == {case_id(c) for c in cases}
    assert {c: r["base"] for c, r in found.items()} == {c: partial if c == alpha else first for c in found}
    assert all(r["status"] != "no baseline" and r["base_median"] is not None for r in found.values()), found


def test_commits_of_one_second_benchmarked_out_of_order_keep_their_ancestry_order(
        tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # a 1x1 register tile: ~20x slower, so that no burst of load on CI can mix the two levels up
    fast, slow = GemmCase("alpha", 128, 128, 128), GemmCase("alpha", 128, 128, 128, tile=(1, 1))
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2026-11-27T09:00:00+00:00")   # a rebase: one second for all
    monkeypatch.setenv("GIT_AUTHOR_DATE", "2026-11-27T09:00:00+00:00")
    repo = make_suite_repo(tmp_path, gemm_suite_files([fast]), name="suite-repo")
    shas = [git(repo, "rev-parse", "HEAD")]
    for i in range(1, 6):
        write_files(repo, gemm_suite_files([slow if i >= 3 else fast]))
        shas.append(commit_all(repo, f"commit {i}"))
    suite = str(repo / "kernels")
    for i in (5, 3, 0, 4, 1, 2):   # newest first, then back and forth
        benchfarm(tmp_path, database_url, "run", "--suite", suite, "--ref", shas[i], "--unpaired")

    with api(tmp_path, database_url) as get:
        series = series_of(get, case_id(fast))
    assert [p["sha"] for p in series["history"]] == shas
    levels = [p["median"] for p in series["history"]]
    assert min(levels[3:]) > 5 * max(levels[:3]), levels   # each commit's own runs, in ancestry order
    # The uploads' analysis equals a batch analysis of the history in ancestry order. Whether 3 + 3
    # loaded CPU runs pass its p < 0.001 is the timing's business (a run slowed 2x by a burst of load
    # on CI once left no point at all), so the expected points come from the levels themselves.
    knobs = Settings().analysis
    batch = changepoints.analyse(levels, window=knobs.window, max_pvalue=knobs.max_pvalue, min_size=knobs.min_size,
                                 min_magnitude=knobs.min_magnitude, confirm_size=knobs.confirm_size,
                                 confirm_pvalue=knobs.confirm_pvalue)
    expected = sorted((shas[cp.last_before], shas[cp.index])
                      for cp in [*batch.confirmed, *batch.pending, *([batch.suspected] if batch.suspected else [])])
    standing = sorted((cp["before_sha"], cp["after_sha"]) for cp in series["change_points"]
                      if cp["lifecycle"] != "retracted")
    assert standing == expected, (series["change_points"], levels)
    assert set(standing) <= {(shas[2], shas[3])}, levels


def test_a_working_tree_and_another_branchs_commit_stay_out_of_the_branch_history(
        tmp_path: Path, database_url: str) -> None:  # noqa: F811
    repo = make_suite_repo(tmp_path, gemm_suite_files(CASES), name="suite-repo")
    suite = str(repo / "kernels")
    alpha = case_id(CASES[0])
    first = git(repo, "rev-parse", "HEAD")
    benchfarm(tmp_path, database_url, "run", "--suite", suite, "--cases", "gemm/alpha*")
    git(repo, "checkout", "-q", "-b", "feature")
    feature = commit_all(repo, "an experiment on a branch")
    git(repo, "checkout", "-q", "main")
    benchfarm(tmp_path, database_url, "run", "--suite", suite, "--cases", "gemm/alpha*", "--ref", "feature")
    second = commit_all(repo, "the next commit of main")
    benchfarm(tmp_path, database_url, "run", "--suite", suite, "--cases", "gemm/alpha*")
    write_files(repo, gemm_suite_files([GemmCase("alpha", 32, 32, 32, "slow"), CASES[1]]))   # not committed
    tree = run_id(benchfarm(tmp_path, database_url, "run", "--worktree", "--cases", "gemm/alpha*", cwd=repo))

    with api(tmp_path, database_url) as get:
        series = series_of(get, alpha)
        assert [p["sha"] for p in series["history"]] == [first, second]
        assert (series["latest_commit"], series["points"]) == (second, 2)
        worktree_run = get(f"/runs/{tree}")
        assert worktree_run["run"]["kind"] == "adhoc" and get(f"/runs/{tree}", page=True)
        (compared,) = worktree_run["comparisons"]
        assert compared["base_sha"] == second and [r["case_id"] for r in compared["rows"]] == [alpha]
        assert not get(f"/commits/{worktree_run['run']['commit_sha']}")["on_default_branch"]
        assert not get(f"/commits/{feature}")["on_default_branch"] and get(f"/commits/{second}")["on_default_branch"]
