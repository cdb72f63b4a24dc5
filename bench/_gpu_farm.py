"""What the suite-scale GPU benches share: variants of this repository's suite built for cuda:sm_90
here (the CPU builder), and on the GPU host a real `benchfarm serve` (SQLite) fed by real
`benchfarm run-job` processes (the Buildkite device step), with the phases of each job read from
the agent's log.

The GPU host has no network and no builder: the bundles travel in `.gpu/<bench>` and the
service's Python packages as wheels (`.whl`: `bash bench/lent_gpu.sh wheels`, which also runs the
benches detached on the lent machine).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
TARGET = "cuda:sm_90"
TOKEN = "bf_bench_admin_token"
Edit = Callable[[Path], None]


def build_variants(out: Path, variants: dict[str, Edit], target: str = TARGET, *, from_first: bool = False) -> dict[str, str]:
    """Clone this checkout, commit each variant's edit on top of the previous one (in order; with
    `from_first`, every later variant on top of the first one instead), build each commit's suite for
    `target` into out/<variant>; returns variant -> commit sha."""
    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    shas: dict[str, str] = {}
    # the clone is scratch, out of `out`'s folder: the device tool carries .gpu/<variant> folders and
    # would find 16 MB more a bench there (64 MiB in all); its name is the repository's in the store
    with tempfile.TemporaryDirectory(prefix="bf-variants-") as work:
        repo = Path(work) / f".{out.name}-repo"
        subprocess.run(["git", "clone", "-q", "--no-local", str(ROOT), str(repo)], check=True)
        git = ["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
        for name, edit in variants.items():
            if from_first and shas:
                subprocess.run([*git, "checkout", "-q", "--detach", next(iter(shas.values()))], check=True)
            edit(repo)
            subprocess.run([*git, "commit", "-q", "--allow-empty", "-am", f"bench variant {name}"], check=True)
            sha = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "pipeline.cli", "build", "--suite", str(repo / "kernels"),
                            "--commit", sha, "--targets", target, "--out", str(out / name)], check=True, cwd=ROOT)
            print(f"built {name} {sha[:12]} in {time.perf_counter() - start:.0f} s", flush=True)
            shas[name] = sha
    (out / "shas.json").write_text(json.dumps(shas, indent=1))
    return shas


def edits(*steps: Edit) -> Edit:
    """One variant's edit made of several, applied in order."""
    def edit(repo: Path) -> None:
        for step in steps:
            step(repo)
    return edit


def replace_in(path: str, old: str, new: str) -> Edit:
    def edit(repo: Path) -> None:
        file = repo / path
        text = file.read_text()
        if old not in text:
            raise SystemExit(f"{path}: {old!r} not found")
        file.write_text(text.replace(old, new))
    return edit


def scratch(name: str) -> Path:
    """A working folder outside the tree (the device tool re-sends the tree at every call); under
    BENCH_SCRATCH when set, so that runs on the GPUs of one host (CUDA_VISIBLE_DEVICES) keep apart."""
    return Path(os.environ.get("BENCH_SCRATCH", "/tmp")) / name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GpuFarm:
    """`benchfarm serve` on SQLite under `home`, and run-job steps against it."""

    def __init__(self, home: Path, service_env: dict[str, str] | None = None):
        self.home = Path(home)
        shutil.rmtree(self.home, ignore_errors=True)
        self.home.mkdir(parents=True)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = self._env("service")
        env.update(BENCHFARM_PORT=str(self.port), BENCHFARM_API_TOKEN=TOKEN, **(service_env or {}))
        self.log = (self.home / "service.log").open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "serve"], env=env, cwd=self.home,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.url}/api/v1/jobs", timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                time.sleep(0.3)
        raise RuntimeError(f"service did not start: {(self.home / 'service.log').read_text()[-2000:]}")

    def _env(self, name: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
        env.update(BENCHFARM_HOME=str(self.home / name), PYTHONPATH=os.pathsep.join(
            p for p in (os.environ.get("PYTHONPATH", ""), str(ROOT)) if p))
        return env

    def run_job(self, bundle: Path, device_class: str, *, base: Path | None = None, pr: bool = False,
                name: str = "step", extra_env: dict[str, str] | None = None, cases: str | None = None,
                counters: str = "counters") -> dict[str, Any]:
        """One `benchfarm run-job` process; returns its summary, wall time and phases (s). `counters`: the
        host's counter cache folder the job uses (under the farm's home; another name: a cache of its own)."""
        env = self._env(name)
        env.update(BENCHFARM_AGENT__SERVER_URL=self.url, BENCHFARM_AGENT__TOKEN=TOKEN, **(extra_env or {}))
        # one agent host: every job's check cache (and counter cache) is the host's (an agent keeps them across
        # jobs), so a binary checked on this device class by an earlier job is not checked (counted) again
        for kept, shared in (("checked", "checked"), ("counters", counters)):
            link = self.home / name / "agent" / kept
            if not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                (self.home / shared).mkdir(parents=True, exist_ok=True)
                link.symlink_to(self.home / shared, target_is_directory=True)
        if pr:
            env.update(BUILDKITE_BUILD_ID=f"{name}-{time.time_ns()}", BUILDKITE_PULL_REQUEST="1")
        argv = [sys.executable, "-m", "pipeline.cli", "run-job", "--bundle", str(bundle), "--device-class",
                device_class, *(["--base-bundle", str(base)] if base else []), *(["--cases", cases] if cases else [])]
        start = time.perf_counter()
        proc = subprocess.run(argv, env=env, cwd=self.home, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"run-job failed ({proc.returncode}): {proc.stdout[-3000:]} {proc.stderr[-3000:]}")
        return {"wall_s": wall, "phases": _phases(self.home / name / "agent" / "agent.log"), "stdout": proc.stdout[-500:]}

    def api(self, path: str, **params: Any) -> Any:
        response = requests.get(f"{self.url}/api/v1/{path}", params=params, timeout=600,
                                headers={"Authorization": f"Bearer {TOKEN}"})
        response.raise_for_status()
        return response.json()

    def compare(self, head: str, base: str | None = None) -> tuple[Any, float]:
        start = time.perf_counter()
        body = self.api("compare", repository=self.repository(), head=head, **({"base": base} if base else {}))
        return body, time.perf_counter() - start

    def repository(self) -> str:
        return self.query("SELECT name FROM repositories LIMIT 1")[0][0]

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.home / "service" / "benchfarm.db") as connection:
            return connection.execute(sql, args).fetchall()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def _phases(log: Path) -> dict[str, float]:
    """Seconds between the agent log's markers: start -> first check -> first timing -> timing done
    -> results uploaded (ingest included: the upload returns when the store has them) -> job done."""
    marks: dict[str, float] = {}
    if not log.exists():
        return {}
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        ts = datetime.fromisoformat(record["ts"]).timestamp()
        event, stage = record.get("event"), str(record.get("stage", ""))
        key = ("start" if event == "run_job" else "check" if event == "progress" and stage.startswith("checking")
               else "time" if event == "progress" and stage.startswith("timing") and stage != "timing: done"
               else "timed" if stage == "timing: done" else "uploaded" if event == "uploaded"
               else "done" if event == "job_done" else None)
        if key in ("start", "check", "time"):
            marks.setdefault(key, ts)
        elif key:
            marks[key] = ts
    order = [k for k in ("start", "check", "time", "timed", "uploaded", "done") if k in marks]
    names = {"start": "load", "check": "check", "time": "time", "timed": "upload+ingest", "uploaded": "finish"}
    return {names[a]: round(marks[b] - marks[a], 2) for a, b in zip(order, order[1:])}


def cuda_device_class() -> str:
    from pipeline.agents.devices import discover_local_devices

    names = [d.device_class.name for d in discover_local_devices() if d.device_class.runtime == "cuda"]
    if not names:
        raise SystemExit("no NVIDIA GPU found on this host")
    return names[0]
