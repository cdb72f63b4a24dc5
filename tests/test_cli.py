"""The `benchfarm` command as a user types it (real subprocesses): flags that say where to listen,
what to build, which cases to run and which commits to compare, and plain messages for mistakes."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import requests

from pipeline.build.bundle import ALL_TARGETS
from pipeline.cli import build_parser
from tests.helpers.cli_zygote import benchfarm_argv
from tests.helpers.live_server import free_port
from tests.helpers.suite_repo import GemmCase, gemm_suite_files, git, make_suite_repo


def benchfarm(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    clean.setdefault("BENCHFARM_HOME", str(cwd / ".benchfarm"))
    return subprocess.run([*benchfarm_argv(), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**clean, **env})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_suite_repo(tmp_path, gemm_suite_files([GemmCase("one")]), name="suite-repo")


def test_serve_listens_where_told_and_keeps_the_access_log_quiet(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env["BENCHFARM_HOME"] = str(tmp_path / "home")
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*benchfarm_argv(), "serve", "--host", "127.0.0.1", "--port",
                                 str(port)], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                assert requests.get(f"http://127.0.0.1:{port}/api/v1/runs", timeout=5).status_code == 200
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    text = log.read_text()
    assert f"http://127.0.0.1:{port}" in text and "GET /api/v1/runs" not in text, text


def test_build_all_targets(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, gemm_suite_files([GemmCase("one"), GemmCase("two", m=4)]), name="two-cases")
    done = benchfarm(repo, "build", "--targets", "all", "--out", str(tmp_path / "bundles"))
    assert done.returncode == 0, done.stderr
    bars = [line for line in done.stderr.splitlines() if " for llvm-cpu:" in line or " for vulkan:" in line]
    assert len(bars) == 1, done.stderr   # one progress bar for the build, not one per case and target
    (manifest,) = (tmp_path / "bundles").glob("*/manifest.json")
    assert json.loads(manifest.read_text())["targets"] == sorted(ALL_TARGETS)


def test_pipeline_takes_a_ref_of_the_checkout(repo: Path) -> None:
    done = benchfarm(repo, "pipeline", "--commit", "HEAD", "--device-classes", "cpu-x86_64")
    assert done.returncode == 0, done.stderr
    assert git(repo, "rev-parse", "HEAD") in done.stdout


def test_a_bad_ref_is_named_in_plain_words(repo: Path) -> None:
    done = benchfarm(repo, "run", "--ref", "no-such-branch")
    assert done.returncode == 1
    assert "no commit 'no-such-branch' in" in done.stderr and "fatal" not in done.stderr, done.stderr
    done = benchfarm(repo, "compare", "HEAD", "no-such-branch")
    assert done.returncode == 1 and "no commit 'no-such-branch'" in done.stderr, done.stderr


def test_trigger_without_token_or_service_says_what_to_do(repo: Path) -> None:
    done = benchfarm(repo, "trigger", "--ref", "HEAD", "--device-class", "cpu-x86_64")
    assert done.returncode == 1 and "benchfarm token create" in done.stderr, done.stderr
    closed = f"http://127.0.0.1:{free_port()}"
    done = benchfarm(repo, "trigger", "--ref", "HEAD", "--device-class", "cpu-x86_64", "--token", "t",
                     "--server", closed)
    assert done.returncode == 1, done.stderr
    assert f"no benchfarm service answers at {closed}" in done.stderr and "benchfarm up" in done.stderr
    assert "HTTP 0" not in done.stderr and "HTTPConnectionPool" not in done.stderr
    done = benchfarm(repo, "jobs", "--server", closed)
    assert done.returncode == 1 and "no benchfarm service answers" in done.stderr, done.stderr


def test_bisect_names_what_it_takes_and_needs_a_token(repo: Path) -> None:
    done = benchfarm(repo, "bisect", "12")
    assert done.returncode == 1 and "series/ID" in done.stderr and "cp/ID" in done.stderr, done.stderr
    done = benchfarm(repo, "bisect", "series/12")
    assert done.returncode == 1 and "benchfarm token create" in done.stderr, done.stderr
    closed = f"http://127.0.0.1:{free_port()}"
    done = benchfarm(repo, "bisect", "http://bench.example/regressions#cp-3", "--token", "t", "--server", closed)
    assert done.returncode == 1 and f"no benchfarm service answers at {closed}" in done.stderr, done.stderr


def test_compare_of_a_commit_without_results_says_so(repo: Path) -> None:
    done = benchfarm(repo, "compare", "HEAD", "HEAD")
    assert done.returncode == 1, done.stderr
    assert "benchfarm run" in done.stderr or "not" in done.stderr, done.stderr


def test_a_bad_config_file_stops_every_command_with_one_line_naming_it(tmp_path: Path) -> None:
    def said(done: subprocess.CompletedProcess[str]) -> str:
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        return " ".join(done.stderr.split())   # as one line: the console wraps at its width

    assert said(benchfarm(tmp_path, "jobs", BENCHFARM_CONFIG="conf.toml")) == \
        "benchfarm: BENCHFARM_CONFIG names conf.toml, which is not a file"
    (tmp_path / "conf.toml").write_text("[measurement]\nmin_samples = [\n")
    assert said(benchfarm(tmp_path, "jobs", BENCHFARM_CONFIG="conf.toml")).startswith(
        "benchfarm: config file conf.toml is not valid TOML: ")
    (tmp_path / "benchfarm.toml").write_text("[measurement]\nmin_sampels = 7\n")
    assert said(benchfarm(tmp_path, "jobs")) == (
        "benchfarm: wrong setting: measurement.min_sampels (env BENCHFARM_MEASUREMENT__MIN_SAMPELS, or in "
        "benchfarm.toml): Extra inputs are not permitted")
    (tmp_path / "benchfarm.toml").write_text("[github]\ncomment_max_chars = 60000\n")   # an earlier version's
    assert said(benchfarm(tmp_path, "jobs")) == (
        "benchfarm: wrong setting: github.comment_max_chars (env BENCHFARM_GITHUB__COMMENT_MAX_CHARS, or in "
        "benchfarm.toml): removed: GitHub's limit on a comment's body is a constant "
        "(pipeline.pr_comments.comment.COMMENT_MAX_CHARS); delete it")


def test_every_flag_and_argument_of_every_command_says_what_it_is() -> None:
    """`benchfarm COMMAND --help` explains each of its options (`up --ref` did not, issue 34)."""

    def unexplained(parser: argparse.ArgumentParser, name: str) -> list[str]:
        found = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    found += unexplained(sub, f"{name} {sub_name}")
            elif not action.help and not isinstance(action, argparse._HelpAction):
                found.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
        return found

    assert unexplained(build_parser(), "benchfarm") == []
