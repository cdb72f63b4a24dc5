"""The bench scripts still run: every one answers `--help`, and the ones that need no GPU, no Otava and
no minutes run for real at a small size (BENCHMARKS.md's figures come from them; one that breaks
silently, as the detection bench's online store once did, reports nonsense without failing)."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
GPU_HOST_ONLY = {"nvbench_reference.py"}   # imports torch and NVBench's `cuda.bench` at the top: the GPU host's
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_") and p.name not in GPU_HOST_ONLY)


def _bench(*args: str | Path, timeout: float = 300) -> str:
    done = subprocess.run([sys.executable, str(BENCH / str(args[0])), *map(str, args[1:])], capture_output=True,
                          text=True, timeout=timeout, cwd=BENCH.parent)
    assert done.returncode == 0, f"{args[0]} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


# Each script as `python bench/<script> --help` runs it (its folder first on sys.path, run as __main__), all in one
# interpreter: the imports a script loads before parsing its arguments (~3-5 s of CPU each on 2 cores) are
# loaded once for all of them.
_HELP_RUNNER = """
import contextlib, io, json, runpy, sys, traceback
bench, answers = sys.argv[1], {}
for name in sys.argv[2:]:
    out, err, path = io.StringIO(), io.StringIO(), list(sys.path)
    sys.argv, sys.path[:0] = [f"{bench}/{name}", "--help"], [bench]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(f"{bench}/{name}", run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        code = "raised"
        err.write(traceback.format_exc())
    finally:
        sys.path[:] = path
    answers[name] = {"code": code, "out": out.getvalue(), "err": err.getvalue()[-4000:]}
print(json.dumps(answers))
"""


@pytest.fixture(scope="module")
def helps() -> dict[str, dict[str, object]]:
    """script -> its --help's exit code, output and error output."""
    done = subprocess.run([sys.executable, "-c", _HELP_RUNNER, str(BENCH), *SCRIPTS], capture_output=True, text=True,
                          timeout=600, cwd=BENCH.parent)
    assert done.returncode == 0, done.stderr[-4000:]
    answers: dict[str, dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return answers


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_bench_answers_help(script: str, helps: dict[str, dict[str, object]]) -> None:
    answer = helps[script]
    assert answer["code"] == 0 and "usage:" in str(answer["out"]), answer


def _dump(path: Path, changes: dict[int, float], *, seed: int, paired: bool, controls: bool = True) -> None:
    """An A/A job's dump as bench/gpu_acceptance.py writes it: 24 suite cases and 24 vendor controls (none
    without `controls`: a CPU suite), 5 rounds of 30 samples (0.5 % round noise); case i of the suite
    `changes[i]` slower (another binary)."""
    rng = np.random.default_rng(seed)
    meta, arrays = [], {}
    for i in range(48 if controls else 24):
        case = f"gemm/shape-{i % 24}/{64 * (i % 24 + 1)}x64x64/bf16/{'triton' if i < 24 else 'vendor'}"
        base = 1e-5 * (1 + i) * np.exp(np.repeat(rng.normal(0, 0.005, 5), 30) + rng.normal(0, 0.002, 150))
        head = base * math.exp(math.log1p(changes.get(i, 0.0))) * np.exp(rng.normal(0, 0.002, 150))
        if not paired:
            head = 1e-5 * (1 + i) * (1 + changes.get(i, 0.0)) * np.exp(
                np.repeat(rng.normal(0, 0.005, 5), 30) + rng.normal(0, 0.002, 150))
        arrays[f"h{i}"] = head.astype(np.float32)
        arrays[f"b{i}"] = (base if paired else np.empty(0)).astype(np.float32)
        digest = f"new-{i}" if i in changes else f"d{i}"
        meta.append({"case": case, "target": "cuda:sm_90", "rounds": [30] * 5, "same_binary": paired and i not in changes,
                     "digest": digest})
    np.savez_compressed(path, meta=json.dumps(meta), **arrays)


def test_aa_recompute_reads_the_acceptance_dumps(tmp_path: Path) -> None:
    _dump(tmp_path / "aa.npz", {}, seed=1, paired=True)
    _dump(tmp_path / "ab.npz", {3: 0.10}, seed=2, paired=True)
    out = _bench("aa_recompute.py", tmp_path / "aa.npz", tmp_path / "ab.npz", "--csv", tmp_path / "paired.csv")
    assert "aa: 48 cases" in out and "ab: 48 cases" in out
    lines = out.splitlines()
    assert "suite   24 cases, flagged 0" in lines[lines.index("aa: 48 cases") + 1]
    assert "suite   24 cases, flagged 1" in lines[lines.index("ab: 48 cases") + 1]
    rows = list(csv.DictReader((tmp_path / "paired.csv").open()))
    assert len(rows) == 96
    moved = next(r for r in rows if r["run"] == "ab" and r["case"].startswith("gemm/shape-3/") and "triton" in r["case"])
    assert moved["status"] == "regressed" and float(moved["change"]) == pytest.approx(0.10, abs=0.01)
    # the CSV alone redoes an all-identical job's calibration: the same p-values as from its samples
    _bench("aa_recompute.py", "--from-csv", tmp_path / "paired.csv", "--csv", tmp_path / "again.csv")
    again = {(r["run"], r["case"]): r for r in csv.DictReader((tmp_path / "again.csv").open())}
    for row in (r for r in rows if r["run"] == "aa"):
        assert float(again[("aa", row["case"])]["pvalue"]) == pytest.approx(float(row["pvalue"]), rel=1e-6, abs=1e-9)

    _dump(tmp_path / "base.npz", {}, seed=3, paired=False)
    _dump(tmp_path / "head.npz", {5: 0.30}, seed=4, paired=False)
    _dump(tmp_path / "again.npz", {}, seed=5, paired=False)
    out = _bench("aa_recompute.py", "--unpaired", *(tmp_path / f"{n}.npz" for n in ("base", "head", "again")))
    lines = out.splitlines()
    # a chain: head judged against base (case 5 moved), then again against head (case 5 moved back)
    for name in ("head", "again"):
        summary = lines[lines.index(f"{name}: 48 cases") + 1:][:2]
        assert "suite   24 cases, flagged 1" in summary[0] and "vendor  24 cases, flagged 0" in summary[1]
    assert "pooled: 96 p-values" in out

    # chains from two GPUs of one host, a folder each, judged apart; their round values alone redo them
    for gpu, seeds in (("gpu0", (8, 9)), ("gpu1", (10, 11))):
        (tmp_path / gpu).mkdir()
        for name, seed in zip(("base", "readme"), seeds, strict=True):
            _dump(tmp_path / gpu / f"{name}.npz", {}, seed=seed, paired=False)
    dumps = [tmp_path / gpu / f"{name}.npz" for gpu in ("gpu0", "gpu1") for name in ("base", "readme")]
    out = _bench("aa_recompute.py", "--unpaired", *dumps, "--csv", tmp_path / "chains.csv",
                 "--rounds-csv", tmp_path / "rounds.csv")
    assert "gpu0/readme: 48 cases" in out and "gpu1/readme: 48 cases" in out and "gpu1/base:" not in out
    families = _bench("aa_recompute.py", "--from-rounds", tmp_path / "rounds.csv", "--csv", tmp_path / "from-rounds.csv",
                      "--by-family")
    live = list(csv.DictReader((tmp_path / "chains.csv").open()))
    # per family and kind: every p-value counted once, those under 0.05 as the per-case CSV has them
    table = [line.split() for line in families.splitlines() if line.startswith("  ") and "p-values, under" in line]
    assert sum(int(cols[2]) for cols in table) == len(live) and len(table) >= 2, families
    for cols in table:
        mine = [r for r in live if r["case"].startswith(cols[0] + "/") and r["case"].endswith("/" + cols[1])]
        assert int(cols[2]) == len(mine) and int(cols[6].rstrip(",")) == sum(float(r["pvalue"]) < 0.05 for r in mine)
    again_rows = list(csv.DictReader((tmp_path / "from-rounds.csv").open()))
    assert [(r["run"], r["case"]) for r in again_rows] == [(r["run"], r["case"]) for r in live] and len(live) == 96
    for row, redo in zip(live, again_rows, strict=True):
        assert float(redo["pvalue"]) == pytest.approx(float(row["pvalue"]), rel=1e-5, abs=1e-8)
        assert float(redo["change"]) == pytest.approx(float(row["change"]), abs=1e-8)

    # a case of the real suite with 1 GB of buffers among them: left out over 128 MiB, kept under 2 GB
    large = "gather-scatter/llama3-8b-embedding/128256x4096x4096/bf16/triton"
    text = (tmp_path / "rounds.csv").read_text().replace("gemm/shape-3/256x64x64/bf16/triton", large)
    (tmp_path / "with-large.csv").write_text(text)
    out = _bench("aa_recompute.py", "--from-rounds", tmp_path / "with-large.csv", "--leave-out-over", str(128 << 20))
    assert "gpu0/readme: 47 cases" in out and "gpu1/readme: 47 cases" in out, out
    out = _bench("aa_recompute.py", "--from-rounds", tmp_path / "with-large.csv", "--leave-out-over", str(2 << 30))
    assert "gpu0/readme: 48 cases" in out, out

    _dump(tmp_path / "cpu-a.npz", {}, seed=6, paired=False, controls=False)
    _dump(tmp_path / "cpu-b.npz", {}, seed=7, paired=False, controls=False)
    out = _bench("aa_recompute.py", "--unpaired", tmp_path / "cpu-a.npz", tmp_path / "cpu-b.npz")
    assert "suite   24 cases, flagged 0" in out and "vendor   0 cases" in out


def test_sensitivity_summary_counts_a_run_gone_on_in_another_report(tmp_path: Path) -> None:
    """The H100 table of 2026-11-25 lost its last job (unpaired 10 %, repetition 3); a report that goes on
    with the same plan adds its jobs to the table, one of another plan is refused."""
    recorded = BENCH.parent / "docs" / "benchmarks" / "sensitivity-h100-2026-11-25.json"
    conv = "| conv | 10 % |"
    assert "| 2 / 2 (" in next(line for line in _bench("sensitivity.py", "summary", recorded).splitlines()
                                if line.startswith(conv))
    report = json.loads(recorded.read_text())
    last = next(j for j in reversed(report["jobs"]) if j["label"] == "unpaired-10-r2")
    (tmp_path / "more.json").write_text(json.dumps({**report, "jobs": [{**last, "label": "unpaired-10-r3"}]}))
    table = _bench("sensitivity.py", "summary", recorded, tmp_path / "more.json")
    assert "| 3 / 3 (+13.4, +13.6, +13.6) |" in next(line for line in table.splitlines() if line.startswith(conv))
    (tmp_path / "other.json").write_text(json.dumps({**report, "plan": {**report["plan"], "levels": {}}}))
    refused = subprocess.run([sys.executable, str(BENCH / "sensitivity.py"), "summary", str(recorded),
                              str(tmp_path / "other.json")], capture_output=True, text=True, cwd=BENCH.parent)
    assert refused.returncode != 0 and "different plans" in refused.stderr


def test_unpaired_calibration_runs() -> None:
    out = _bench("unpaired_calibration.py", "--seeds", "1")
    last = out.strip().splitlines()[-1]
    assert last.startswith("1 |") and last.count("/") == 2


def test_case_id_cost_runs() -> None:
    out = _bench("case_id_cost.py", "--distinct", "200", "--scale", "2")
    assert "CaseId.parse, first of 200 ids" in out and "compare(), " in out


def test_large_document_runs_on_sqlite(tmp_path: Path) -> None:
    out = _bench("large_document.py", "--cases", "4", "--samples", "300", "--sqlite", tmp_path / "store.db")
    report = json.loads(out)
    assert report["head_samples"] == 1200 and report["sqlite"]["samples"] >= 1200


def test_load_runs_on_postgresql_at_a_small_size() -> None:
    """bench/load.py end to end (a real `benchfarm serve`, agent processes, readers) at a toy size."""
    import uuid

    from sqlalchemy.engine import make_url

    from tests.helpers.stores import POSTGRES_ADMIN_URL

    url = make_url(POSTGRES_ADMIN_URL).set(database=f"bf_load_{uuid.uuid4().hex[:12]}")
    out = _bench("load.py", "--url", url.render_as_string(hide_password=False), "--agents", "3", "--readers", "2",
                 "--cases", "4", "--samples", "300", "--scale-cases", "10", "--scale-commits", "3")
    report = json.loads(out)
    assert report["accounting"]["ok"] and report["accounting"]["samples_stored"] == 4 * 4 * 300, report["accounting"]
    assert report["load"]["documents"] == 3 and report["load"]["answers_5xx"] == 0, report["load"]
    assert {"dashboard", "compare", "series"} <= set(report["load"]["pages"])


def test_lent_gpu_script_runs_detached_and_reports_each_exit(tmp_path: Path) -> None:
    """bench/lent_gpu.sh: commands launched under setsid in their own tree copy, waited on by name; an
    `exit` inside a command still leaves its code (a run that lost its rc was waited on until the limit)."""
    site, tree, out = tmp_path / "site", tmp_path / "tree", tmp_path / "out"
    (site / "pydantic").mkdir(parents=True)   # wheels already installed: no pip on this host
    tree.mkdir()
    (tree / "marker.txt").write_text("the tree")
    names = [f"bf-test-{tmp_path.name}-{i}" for i in (1, 2)]
    tools = tmp_path / "tools"   # an nvidia-smi that answers the memory query as the real one does
    tools.mkdir()
    (tools / "nvidia-smi").write_text('#!/bin/sh\necho "2026/11/26 01:00:00.000, 0, 41234 MiB, 81559 MiB"\n')
    (tools / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{tools}:/usr/bin:/bin", "OUT": str(out), "LENT_GPU_SITE": str(site)}

    def script(*args: str) -> str:
        done = subprocess.run(["bash", str(BENCH / "lent_gpu.sh"), *args], cwd=tree, env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    try:
        script("launch", names[0], 'cat marker.txt > "$RUN_OUT/seen.txt"; echo "path $PYTHONPATH"; '
                                   'mkdir "$RUN_OUT/sens"; echo 1 > "$RUN_OUT/sens/a.json"; echo 2 > "$RUN_OUT/x.npz"')
        script("launch", names[1], "sleep 1; exit 3")
        report = script("wait", "30", *names)
        assert f"== {names[0]} finished rc=0" in report and f"== {names[1]} finished rc=3" in report
        # what comes back stays within the device tool's 8 files: small files as one archive a name,
        # each array dump on its own
        returned = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
        assert returned == sorted([f"{names[0]}.tar.gz", f"{names[0]}/x.npz", f"{names[1]}.tar.gz"])
        with tarfile.open(out / f"{names[0]}.tar.gz") as archive:
            assert archive.extractfile("./seen.txt").read() == b"the tree"   # type: ignore[union-attr]
            assert archive.extractfile("./sens/a.json").read() == b"1\n"      # type: ignore[union-attr]
            log = archive.extractfile("./log").read().decode()              # type: ignore[union-attr]
        assert f"path {site}:/tmp/{names[0]}-repo" in log
        with tarfile.open(out / f"{names[1]}.tar.gz") as archive:   # sampled while it ran (1 s: once or more)
            memory = archive.extractfile("./gpu-memory.csv").read().decode().splitlines()  # type: ignore[union-attr]
        assert memory and all(line.endswith("41234 MiB, 81559 MiB") for line in memory), memory
    finally:
        for name in names:
            for suffix in ("repo", "out", "small.tar.gz"):
                subprocess.run(["rm", "-rf", f"/tmp/{name}-{suffix}"], check=False)
