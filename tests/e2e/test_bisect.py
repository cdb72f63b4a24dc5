"""End to end on the CPU: confirmed change points over a 16-commit range are bisected by a real
`benchfarm serve` (its builder and bisector threads) and a real `benchfarm agent`, with real
iree-compile builds and real paired timings.

The suite's git repository: commits c-4..c0, then the range c1..c16, then c17..c23 (committer
dates one minute apart). Three 128x128x128 IREE GEMMs, one change point each (levels as `benchfarm
run --unpaired` times them on this 2-core VM, quiet):
- alpha: IREE's default tile until c10, an 8x2 register tile from c11: about 3.5x slower (51 -> 177 us);
- beta: the slowdown spread over two commits: the default tile, 8x2 from c6, 2x2 from c11 (51 -> 177
  -> 491 us: two steps of about one size in log ratio, which the search compares: a loaded VM drifts a
  level by a share of it). The issue asked for +5 % steps; on this shared 2-core VM, where unpaired
  runs of one binary move by 10 % and more, steps that small are not reliably confirmed by the history
  nor separated by a few paired rounds, so the steps are made larger (the search itself separates +5 %
  steps on tight intervals: tests/results/analysis/test_bisect_search.py);
- gamma: the default tile, 2x2 from c11 (about 9.6x), and at c8 its MLIR is broken (iree-compile
  rejects it): unbuildable there.
128, not 64: at 64x64x64 the default tile's level (13 us) moved by 1.4 % from run to run and its slow
tiles' by 0.1-0.3 %, so the outlier rule's noise (pooled over the history, most of it the quiet slow
level) flagged c1's ordinary run and the point's range became (c0, c16]: the fixture ran its history
two to four times. At 128 every level moves by 0.3-0.7 %.
Only c-4..c1 and c16..c23 are benchmarked (`benchfarm run --unpaired`, local runs: the history),
so the analysis confirms each change point with six commits before and eight after, and range
(c1, c16]: in the range, only c1 and c16 have results.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.helpers.cli_zygote import benchfarm_argv
from tests.helpers.farm import Farm, base_env, wait_for
from tests.helpers.suite_repo import (
    GemmCase,
    case_id,
    gemm_suite_files,
    git,
    write_files,
)

pytestmark = pytest.mark.e2e

RANGE = 16
SHAPE = (128, 128, 128)
# Eight commits at the new level, not four: a level younger than 2 * min_size must hold with any one
# commit left out, and CI's VM timed the slow tiles with 20 % spread between runs (alpha and gamma,
# one kernel, came out +185 % and +132 %), where a four-commit level stayed "suspected".
BENCHMARKED = (-4, -3, -2, -1, 0, 1, *range(16, 24))
# The order the history is run in: neighbouring commits two or more runs apart, so that a burst of load
# of a few seconds (the other test processes' compiles and timings) slows commits that are not
# neighbours, which the outlier rule leaves out one by one; two slowed neighbours next to the step (c-1
# and c0 beside two burners: c1's normal run then looked like the outlier) made the range (c0, c16].
# The store orders the history by ancestry, whatever the order of the runs.
RUN_ORDER = (1, -2, -4, -1, -3, 0, 16, 20, 17, 21, 18, 22, 19, 23)
# The store's confirmation rule for this short history: p <= 1e-4, not the default 1e-8 (made for
# a window of up to 50 commits). Beside two CPU burners a slowed kernel's runs split between two levels
# (~54 and ~78 us over a ~15 us base: whether a burner shares its core), and over six commits before and
# eight after such a split step tests at p ~ 1e-6: reported, never confirmed, however often it is run
# again (loaded run 3 at 6f690e5). The subject here is the bisection of confirmed points, not the rule.
CONFIRM = {"BENCHFARM_ANALYSIS__CONFIRM_PVALUE": "1e-4"}
HISTORY = {"BENCHFARM_MEASUREMENT__MIN_TIME_S": "0.2", "BENCHFARM_MEASUREMENT__MIN_SAMPLES": "4",
           "BENCHFARM_MEASUREMENT__MAX_TIME_S": "1", "BENCHFARM_MEASUREMENT__ROUNDS": "5", **CONFIRM}
PAIRED = {"BENCHFARM_MEASUREMENT__ROUNDS": "5", "BENCHFARM_MEASUREMENT__MIN_TIME_S": "0.1",
          "BENCHFARM_MEASUREMENT__MAX_TIME_S": "1"}


def cases_at(i: int) -> list[GemmCase]:
    m, n, k = SHAPE
    alpha = GemmCase("alpha", m, n, k, tile=(8, 2) if i >= 11 else None)
    beta = GemmCase("beta", m, n, k, tile=(2, 2) if i >= 11 else (8, 2) if i >= 6 else None)
    gamma = GemmCase("gamma", m, n, k, "broken" if i == 8 else "ok", tile=(2, 2) if i >= 11 else None)
    return [alpha, beta, gamma]


ALPHA, BETA, GAMMA = (case_id(c) for c in cases_at(0))


def make_repo(root: Path) -> tuple[Path, dict[int, str]]:
    repo = root / "suite-repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = {}
    for i in range(-4, RANGE + 8):
        write_files(repo, {**gemm_suite_files(cases_at(i)), "CHANGES": f"change {i}\n"})
        git(repo, "add", "-A")
        date = f"2026-11-20T10:{i + 10:02d}:00+00:00"
        proc = subprocess.run(["git", "-C", str(repo), "-c", "user.name=Dev", "-c", "user.email=dev@example.com",
                               "-c", "commit.gpgsign=false", "commit", "-q", "-m", f"c{i}: change {i}"],
                              env={**os.environ, "GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date},
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        shas[i] = git(repo, "rev-parse", "HEAD")
    return repo, shas


def local_run(home: Path, repo: Path, sha: str, cwd: Path) -> None:
    env = {**base_env(home), **HISTORY}
    proc = subprocess.run([*benchfarm_argv(), "run", "--unpaired", "--suite", str(repo / "kernels"),
                           "--ref", sha],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"benchfarm run {sha[:10]} failed:\n{proc.stdout}\n{proc.stderr}"


def cli(farm: Farm, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**base_env(farm.root / "cli"), "BENCHFARM_API_TOKEN": "bf_test_admin_token"}
    return subprocess.run([*benchfarm_argv(), *args, "--server", farm.url], cwd=farm.root, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


class Bisected:
    def __init__(self, farm: Farm, shas: dict[int, str]) -> None:
        self.farm, self.shas = farm, shas
        self.index = {sha: i for i, sha in shas.items()}

    def of(self, case: str) -> dict[str, Any]:
        """The finished bisection of `case`'s change point (waits for it)."""
        def finished() -> dict[str, Any] | None:
            found = [b for b in self.farm.api("GET", "bisections") if b["cases"] == [case]]
            return found[0] if found and found[0]["state"] not in ("queued", "running") else None
        try:
            result: dict[str, Any] = wait_for(finished, 600, f"the bisection of {case}", period_s=1.0)
        except AssertionError:
            print(json.dumps(self.farm.api("GET", "bisections"), indent=1, default=str)[-6000:])
            print(self.farm.logs())
            raise
        return result

    def label(self, sha: str) -> str:
        return f"c{self.index[sha]}"


@pytest.fixture(scope="module")
def bisected(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bisected]:
    root = tmp_path_factory.mktemp("bisect-farm")
    repo, shas = make_repo(root)
    home = root / "service"   # the farm's service home: the history's store, bundles and build cache
    # A loaded 2-core machine now and then slows a whole run (separate runs of one binary differ by up
    # to 25 %: docs/benchmarks/history.md, "A/A on the CPU"). A run at either end of the step that is off its level
    # is left out as an outlier run, which honestly widens the range: c16 at +2.5 % over a level whose runs
    # agree within 0.5 % made it (c1, c17]; a slow c16 and c17 (+40 %, CI) (c1, c18]. Such a range holds
    # the culprit but takes the search elsewhere than these tests follow, so, as a user would, the runs at
    # the range's ends and those named by an unexpected change point are run again (a run adds a level to
    # its commit's point, the median of its runs' levels) until each series has its one confirmed change
    # point over (c1, c16].
    # A slow run of the newest commits (CI: (c21, c22] suspected on all three cases; here once +8 % at c23
    # on one) is an honest `suspected` change point after the range: not confirmed, not bisected: allowed.
    index = {sha: i for i, sha in shas.items()}
    later = {shas[i] for i in range(17, RANGE + 8)}

    def unexpected(points: list[tuple[str, str, str, float]]) -> list[tuple[str, str, str, float]]:
        confirmed = [p for p in points if p[0] == "confirmed"]
        wrong = [p for p in confirmed if p[1:3] != (shas[1], shas[16])]
        if len(confirmed) != 3 and not wrong:
            wrong = confirmed or [("missing", shas[1], shas[16], 0.0)]
        return wrong + [p for p in points if p[0] != "confirmed" and not (p[1] in later | {shas[16]} and p[2] in later)]

    rerun: list[int] = list(RUN_ORDER)
    for attempt in range(8):   # each pass runs the named commits again; a loaded VM took 5 (two burners beside)
        for i in rerun:
            local_run(home, repo, shas[i], root)
        with sqlite3.connect(home / "benchfarm.db") as db:   # fail now, not after waiting, when too noisy
            points = db.execute(
                "SELECT cp.lifecycle, b.sha, a.sha, cp.magnitude FROM change_points cp "
                "JOIN commits b ON b.id = cp.before_commit_id JOIN commits a ON a.id = cp.after_commit_id "
                "WHERE cp.lifecycle != 'retracted' ORDER BY cp.series_id").fetchall()
            values = db.execute("SELECT series_id, commit_id, median FROM measurements ORDER BY id").fetchall()
        by_series: dict[int, list[str]] = {}
        for series, _commit, median in values:
            by_series.setdefault(series, []).append(f"{median * 1e6:.1f}")
        print(f"history pass {attempt + 1} ({len(rerun)} runs): points {points}; medians (us) per series {by_series}")
        off = unexpected(points)
        if not off:
            break
        named = {index[sha] for p in off for sha in p[1:3] if sha in index}
        # the commits a wrong range names, their neighbours (whose slow runs made it) and the step's ends
        near = {i + d for i in named | {0, 1, 16, 17} for d in (-1, 0, 1)}
        rerun = [i for i in RUN_ORDER if i in near]
        if sum(p[0] == "confirmed" for p in points) < 3:
            # a series without any confirmed point (CI once: a series short of its confirmed point after
            # five passes running the ends again): a commit's point is the median of its runs' levels, so
            # another run of every commit outvotes any one slow run wherever it fell
            rerun = list(RUN_ORDER)
    with sqlite3.connect(home / "benchfarm.db") as db:
        every = db.execute("SELECT cp.series_id, cp.lifecycle, b.sha, a.sha, cp.magnitude FROM change_points cp "
                           "JOIN commits b ON b.id = cp.before_commit_id JOIN commits a ON a.id = cp.after_commit_id "
                           "ORDER BY cp.series_id, cp.id").fetchall()
    labelled = [(s, lifecycle, f"(c{index.get(b, '?')}, c{index.get(a, '?')}]", round(m, 3))
                for s, lifecycle, b, a, m in every]
    assert not unexpected(points), f"change points, retracted too: {labelled}; medians (us): {by_series}"
    from pipeline.agents.devices import cpu_device

    local = cpu_device()
    assert local is not None
    device_class = local.device_class.name
    farm = Farm(root=root, suite=repo / "kernels", lease_s=30.0)
    try:
        farm.service({"BENCHFARM_BISECT__PERIOD_S": "0.5", **CONFIRM})
        farm.agent("agent-1", {"BENCHFARM_AGENT__DEVICE_CLASSES": json.dumps({device_class: device_class}),
                               "BENCHFARM_AGENT__ONLY_CLASSES": json.dumps([device_class]), **PAIRED})
        yield Bisected(farm, shas)
    finally:
        farm.stop()


def test_a_3x_slowdown_in_commit_11_seen_only_at_commits_1_and_16_is_bisected_to_it_in_at_most_5_jobs(
        bisected: Bisected) -> None:
    b = bisected.of(ALPHA)
    history = bisected.farm.api("GET", f"change-points/{b['change_point_id']}")
    assert (history["before_sha"], history["after_sha"]) == (bisected.shas[1], bisected.shas[16])
    assert b["requested_by"] == "benchfarm bisect"   # started when the change point was confirmed
    steps = [(bisected.label(s["commit"]), s["verdict"], s["change"]) for s in b["steps"]]
    assert b["outcome"] == "culprit" and b["culprit"] == bisected.shas[11], f"{b['summary']}: {steps}"
    assert len(b["steps"]) <= 5, steps
    assert all(s["paired"] and s["ci_low"] <= s["change"] <= s["ci_high"] for s in b["steps"]), steps
    # the bad commit first: several times its base (about 3.5x as the agent times it on this VM)
    assert steps[0][0] == "c16" and 1.5 < steps[0][2] < 6
    # attached to the change point: its newest bisection, and a triage event naming the culprit
    assert history["bisection"]["culprit"] == bisected.shas[11]
    assert any(e["who"] == "benchfarm bisect" and bisected.shas[11][:10] in e["note"] for e in history["events"])
    shown = cli(bisected.farm, "bisect", f"bisection/{b['id']}")
    assert shown.returncode == 0 and f"commit {bisected.shas[11][:10]} made the change" in shown.stdout, shown


def timed_binaries(bisected: Bisected, b: dict[str, Any], case: str) -> list[str]:
    """For a failing search: each step's run commit, head bundle and the case's artifact in it (a clean-clone
    CI run once read c8, the 8x2 tile, exactly as the bad commit's 4x2: the same binary, or noise?)."""
    seen = []
    for s in b["steps"]:
        try:
            run = bisected.farm.api("GET", f"runs/{s['run_id']}")
            digest = run["jobs"][0]["bundle_digest"]
            manifest = bisected.farm.api("GET", f"bundles/{digest}/files/manifest.json")
            artifact = [e["artifact"]["sha256"][:12] for e in manifest["entries"] if e["case"] == case and e.get("artifact")]
            seen.append(f"{bisected.label(s['commit'])}: run of {run['run']['commit_sha'][:10]}, bundle {digest[:12]}, "
                        f"artifact {artifact}, change {s['change']}")
        except Exception as exc:   # a diagnosis, not the test: say what could not be read
            seen.append(f"{bisected.label(s['commit'])}: {type(exc).__name__}: {exc}"[:300])
    return seen


def test_a_slowdown_spread_over_two_commits_is_reported_as_both(bisected: Bisected) -> None:
    b = bisected.of(BETA)
    steps = [(bisected.label(s["commit"]), s["verdict"], s["change"]) for s in b["steps"]]
    # with -s: how far from its 16-job limit a passing search is, and what each step timed
    print(f"beta: {len(steps)} steps {steps}; timed {timed_binaries(bisected, b, BETA)}")
    assert b["outcome"] == "several commits", f"{b['summary']}: {steps}; {timed_binaries(bisected, b, BETA)}"
    assert [c["sha"] for c in b["result"]["culprits"]] == [bisected.shas[6], bisected.shas[11]], \
        f"{steps}; {timed_binaries(bisected, b, BETA)}"
    assert "not attributable to one commit" in b["summary"]
    assert "in between" in {v for _, v, _ in steps}


def test_an_unbuildable_commit_is_skipped_and_named(bisected: Bisected) -> None:
    b = bisected.of(GAMMA)
    steps = [(bisected.label(s["commit"]), s["state"], s["verdict"]) for s in b["steps"]]
    assert b["outcome"] == "culprit" and b["culprit"] == bisected.shas[11], f"{b['summary']}: {steps}"
    assert ("c8", "skipped", "unbuildable") in steps
    skipped = b["result"]["skipped"]
    assert [s["sha"] for s in skipped] == [bisected.shas[8]] and "iree-compile" in skipped[0]["reason"]
    assert f"{bisected.shas[8][:10]} (unbuildable)" in b["summary"]
    # asking again while it is done is a new bisection; asking for a retracted or unknown one is refused
    refused = cli(bisected.farm, "bisect", "cp/999999")
    assert refused.returncode == 1 and "no change point 999999" in refused.stderr, refused


def test_the_pages_show_the_steps_and_the_result(bisected: Bisected) -> None:
    b = bisected.of(ALPHA)
    cp = bisected.farm.api("GET", f"change-points/{b['change_point_id']}")
    for path in (f"/series/{cp['series_id']}", "/regressions"):
        html = requests.get(bisected.farm.url + path, timeout=30).text
        assert f'id="bisection-{b["id"]}"' in html and bisected.shas[11][:10] in html, path
