"""Ctrl-C on `benchfarm run` and `benchfarm up`, as a terminal sends it (SIGINT to the whole
process group, compile workers included): the run and its jobs end as failed with the reason
"cancelled", nothing is left "running", and the command prints one short line, no traceback."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.results.store.db import open_store, session_scope
from pipeline.results.store.models import Job, Run
from tests.helpers.cli_zygote import benchfarm_argv
from tests.helpers.live_server import free_port
from tests.helpers.suite_repo import GemmCase, gemm_suite_files, make_suite_repo
from tests.helpers.stores import database_url  # noqa: F401  (the fixture: SQLite and PostgreSQL)

pytestmark = pytest.mark.e2e

CASES = [GemmCase("alpha", 64, 64, 64), GemmCase("beta", 32, 64, 128)]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A compile cache holding CASES, filled once by `benchfarm build`: each test's `<home>/cache` starts as
    its copy (`_compiled_cases`), so that their runs compile none of CASES (the interrupt of a build has cases of
    its own to compile)."""
    folder = tmp_path_factory.mktemp("compiled")
    repo = make_suite_repo(folder, gemm_suite_files(CASES), name="suite-repo")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")} | {
        "BENCHFARM_HOME": str(folder / "home")}
    done = subprocess.run([*benchfarm_argv(), "build", "--suite", str(repo / "kernels")], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and ": 2 built, 0 failed" in done.stdout, done.stdout + done.stderr
    return folder / "home" / "cache"


@pytest.fixture(autouse=True)
def _compiled_cases(compiled: Path, tmp_path: Path) -> None:
    shutil.copytree(compiled, tmp_path / "home" / "cache")


def _env(tmp_path: Path, url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    # timing that would go on for minutes: the interrupt lands while a job runs
    env.update(BENCHFARM_HOME=str(tmp_path / "home"), BENCHFARM_DATABASE_URL=url,
               BENCHFARM_MEASUREMENT__MIN_TIME_S="120", BENCHFARM_MEASUREMENT__MAX_TIME_S="300", **extra)
    return env


def _jobs(url: str) -> list[tuple[str, str | None, str, str | None]]:
    """(job status, job error, run status, run error) of every job in the store."""
    engine = open_store(url)
    try:
        with session_scope(engine) as session:
            return [tuple(row) for row in session.execute(  # type: ignore[misc]
                sa.select(Job.status, Job.error, Run.status, Run.error).join(Run, Job.run_id == Run.id))]
    finally:
        engine.dispose()


def _interrupt_while_running(proc: subprocess.Popen[str], url: str, ready: Callable[[], bool]) -> tuple[str, str]:
    deadline = time.monotonic() + 240
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"no job started:\n{out}\n{err}")
        time.sleep(0.3)
    time.sleep(1.5)
    os.killpg(proc.pid, signal.SIGINT)   # what Ctrl-C in a terminal does
    try:
        return proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


def _as_from_a_terminal() -> None:
    """A command typed in a terminal gets SIGINT with its default action; a test run started in the
    background of a non-interactive shell (`bash .ci/run &`) ignores it, and children inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _running(url: str) -> bool:
    try:
        return any(status == "running" for status, *_ in _jobs(url))
    except sa.exc.SQLAlchemyError:
        return False


def _queued(url: str) -> bool:
    try:
        return bool(_jobs(url))
    except sa.exc.SQLAlchemyError:
        return False


@pytest.mark.parametrize("stage", ["build", "timing"])
def test_ctrl_c_on_run_cancels_the_run(tmp_path: Path, database_url: str, stage: str) -> None:  # noqa: F811
    # many cases: the build takes seconds on two cores, long enough to be interrupted
    cases = CASES + [GemmCase(f"extra{i}", 16 * (i + 1), 32, 48) for i in range(8)] if stage == "build" else CASES
    repo = make_suite_repo(tmp_path, gemm_suite_files(cases), name="suite-repo")
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "run", "--suite", str(repo / "kernels")],
                            cwd=tmp_path, env=_env(tmp_path, database_url), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_as_from_a_terminal)
    ready = (lambda: _queued(database_url)) if stage == "build" else (lambda: _running(database_url))
    out, err = _interrupt_while_running(proc, database_url, ready)

    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in out + err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("benchfarm run: interrupted: run ") and "cancelled" in last, err
    (job_status, job_error, run_status, run_error), = _jobs(database_url)
    assert (job_status, run_status) == ("failed", "failed")
    expected = "waiting for its build" if stage == "build" else "running"
    assert job_error == f"cancelled: interrupted (Ctrl-C) while the job was {expected}", job_error
    assert run_error is not None and "cancelled" in run_error


def test_ctrl_c_on_up_cancels_its_running_job(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    repo = make_suite_repo(tmp_path, gemm_suite_files(CASES), name="suite-repo")
    env = _env(tmp_path, database_url, BENCHFARM_PORT=str(free_port()))
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "up", "--suite", str(repo / "kernels")],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_as_from_a_terminal)
    out, err = _interrupt_while_running(proc, database_url, lambda: _running(database_url))

    assert proc.returncode == 130, (out, err)   # a stop that cancelled work, as `run` interrupted; idle: 0
    assert "cancelled (it was running when benchfarm up stopped)" in err, err   # up's log, one format
    assert "Traceback" not in out + err, err
    (job_status, job_error, run_status, _), = _jobs(database_url)
    assert (job_status, run_status) == ("failed", "failed")
    assert job_error is not None and job_error.startswith("cancelled"), job_error


def _run(repo: Path, tmp_path: Path, env: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "pipeline.cli", "run", "--suite", str(repo / "kernels"), *extra],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _wait_running(proc: subprocess.Popen[str], url: str) -> None:
    deadline = time.monotonic() + 240
    while not _running(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"no job started:\n{out}\n{err}")
        time.sleep(0.3)
    time.sleep(1.5)


def test_sigterm_on_run_cancels_the_run_as_ctrl_c_does(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    repo = make_suite_repo(tmp_path, gemm_suite_files(CASES), name="suite-repo")
    proc = _run(repo, tmp_path, _env(tmp_path, database_url))
    _wait_running(proc, database_url)
    proc.send_signal(signal.SIGTERM)   # kill PID, systemctl stop: the process alone, not its group
    out, err = proc.communicate(timeout=60)

    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in out + err, err
    assert err.strip().splitlines()[-1].startswith("benchfarm run: interrupted: run "), err
    (job_status, job_error, run_status, _), = _jobs(database_url)
    assert (job_status, run_status) == ("failed", "failed")
    assert job_error == "cancelled: interrupted (SIGTERM) while the job was running", job_error

    quick = {k: v for k, v in _env(tmp_path, database_url).items() if not k.startswith("BENCHFARM_MEASUREMENT__")}
    again = _run(repo, tmp_path, quick, "--cases", "gemm/alpha*")
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, (out, err)
    assert sorted(status for status, *_ in _jobs(database_url)) == ["done", "failed"]


def test_a_killed_runs_job_is_failed_by_the_next_run(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    repo = make_suite_repo(tmp_path, gemm_suite_files(CASES), name="suite-repo")
    killed = _run(repo, tmp_path, _env(tmp_path, database_url))
    _wait_running(killed, database_url)
    os.killpg(killed.pid, signal.SIGKILL)   # nothing to clean up with: the job stays "running"
    killed.communicate(timeout=60)
    assert [status for status, *_ in _jobs(database_url)] == ["running"]

    quick = {k: v for k, v in _env(tmp_path, database_url).items() if not k.startswith("BENCHFARM_MEASUREMENT__")}
    again = _run(repo, tmp_path, quick, "--cases", "gemm/alpha*")
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, (out, err)

    jobs = _jobs(database_url)
    assert sorted(status for status, *_ in jobs) == ["done", "failed"], jobs
    (_, error, run_status, _), = [j for j in jobs if j[0] == "failed"]
    assert run_status == "failed"
    assert error is not None and "ended without finishing it" in error, error


def test_serve_fails_at_start_the_jobs_of_a_killed_run(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    repo = make_suite_repo(tmp_path, gemm_suite_files(CASES), name="suite-repo")
    killed = _run(repo, tmp_path, _env(tmp_path, database_url))
    _wait_running(killed, database_url)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.communicate(timeout=60)

    env = _env(tmp_path, database_url, BENCHFARM_PORT=str(free_port()))
    serve = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "serve"], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while _running(database_url) and serve.poll() is None and time.monotonic() < deadline:
            time.sleep(0.3)
    finally:
        os.killpg(serve.pid, signal.SIGINT)
        out, err = serve.communicate(timeout=60)
    (job_status, job_error, run_status, _), = _jobs(database_url)
    assert (job_status, run_status) == ("failed", "failed"), (out, err)
    assert job_error is not None and "ended without finishing it" in job_error, job_error
