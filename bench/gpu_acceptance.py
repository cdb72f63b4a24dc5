"""Suite-scale acceptance on an NVIDIA GPU through real processes (issues 11 and 12): A/A over the whole
CUDA part of the default suite, paired and unpaired, and the pull-request latency.

Two steps (the GPU host has no Triton 3.9 and no network):

    .venv/bin/python bench/gpu_acceptance.py build --out .gpu/acc      # here: five commits, cuda:sm_90
    python3 bench/gpu_acceptance.py run --bundles .gpu/acc --out $OUT   # on the GPU host (with .whl)

`build` clones this checkout and commits, in order: `base` (HEAD), `readme` (README only: the
identical-code head of the A/A runs), `one-tile` (one GEMM shape's tile changed: PR (a)),
`all-tiles` (every Triton GEMM tile's pipeline depth changed, prefill, decode and small: PR (b)), `rename`
(on top of all-tiles, every Triton kernel function renamed: all 82 Triton binaries differ from base's);
each built for cuda:sm_90.

`run` starts `benchfarm serve` (SQLite, default settings but the identical-binary shortcut off, so
that the A/A runs are judged as if the binaries differed) and runs `benchfarm run-job` steps against it:
1. nightly paired (readme over base, every case timed): the PR latency's case (c), and A/A 1;
2. PR (a) and (b): one-tile and all-tiles over base, as a pull request's step (changed binaries and
   4 rotating sentinels timed, the rest reported unchanged);
3. A/A 2 and 3: the nightly's pairing again (the check cache now warm); `rename` (ACCEPTANCE_STEPS):
   rename over base as a pull request, every Triton case and 4 sentinels timed (the PR latency; the
   jobs of one run share an agent's check cache, so base's binaries are the nightly's, checked; the
   renamed binaries have the base's code, timed with `measurement.time_same_code` as a commit that
   changed every kernel would be), then the same pull request as it runs by default (same code: the
   sentinels alone);
4. unpaired A/A: base alone, then readme alone, compared with an explicit base; with
   `ACCEPTANCE_UNPAIRED_RUNS=N` (default 2) a chain of N such jobs, base and readme in turn, each
   compared with the one before it (the other commit's newest run): N - 1 repetitions out of N jobs,
   neighbours sharing a job (an unpaired job takes ~10 minutes of an H100: three independent pairs
   do not fit one session's device time).
After each job: GET /api/v1/compare; everything is written to OUT/acceptance.json as it goes (a
run longer than one device call can be read by the next), and each A/A job's samples to
OUT/<label>.npz (float32, per case: round sizes, head and paired base samples; unpaired jobs: no base)
so that the verdicts can be recomputed from the same measurements. `ACCEPTANCE_AGENT_ENV` (a JSON object
of BENCHFARM_* settings) is given to the run-job processes alone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _gpu_farm import GpuFarm, build_variants, cuda_device_class, edits, replace_in, scratch  # noqa: E402
from _two_step import two_step_main  # noqa: E402

GEMM = "kernels/gemm/triton_cases.py"
VARIANTS = {
    "base": lambda repo: None,
    "readme": replace_in("README.md", "# benchfarm", "# benchfarm\n\n(an edit that changes no kernel)"),
    "one-tile": replace_in(GEMM, '"4096x4096x4096": _PREFILL,',
                           '"4096x4096x4096": Tile(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, '
                           'num_stages=4),'),
    # every Triton GEMM tile: the prefill and small tiles one pipeline stage deeper, the decode tile one shallower
    "all-tiles": edits(
        replace_in(GEMM, "num_stages=3)", "num_stages=4)"),
        replace_in(GEMM, "group_m=1, num_warps=4, num_stages=4)", "group_m=1, num_warps=4, num_stages=3)")),
}


def rename_kernels(repo: Path) -> None:
    """Every Triton kernel function renamed (`_renamed` appended) wherever the suite names it: every
    Triton binary differs from the base's (its symbol), none of their code does."""
    files = sorted((repo / "kernels").rglob("*.py"))
    names = sorted({m.group(1) for f in files for m in re.finditer(r"@triton\.jit\s*\ndef (\w+)\(", f.read_text())})
    if not names:
        raise SystemExit("no @triton.jit kernel found under kernels/")
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    for f in files:
        text = f.read_text()
        renamed = pattern.sub(r"\1_renamed", text)
        if renamed != text:
            f.write_text(renamed)


VARIANTS["rename"] = lambda repo: rename_kernels(repo)   # on top of all-tiles: every Triton binary differs from base


def build(out: Path) -> None:
    build_variants(out, VARIANTS, target=os.environ.get("ACCEPTANCE_TARGET", "cuda:sm_90"))


def _save(out: Path, report: dict[str, Any]) -> None:
    partial = out / "acceptance.json.tmp"
    partial.write_text(json.dumps(report, indent=1))
    os.replace(partial, out / "acceptance.json")


def _dump(farm: GpuFarm, head: str, path: Path) -> int:
    """The newest job's samples of `head` as float32 arrays per case (offline re-analysis)."""
    import numpy as np

    job = farm.query("SELECT j.id FROM jobs j JOIN runs r ON j.run_id = r.id JOIN commits c ON r.commit_id = c.id "
                     "WHERE c.sha = ? ORDER BY j.finished_at DESC LIMIT 1", head)[0][0]
    from pipeline.contracts.arrays import from_blob

    rows = farm.query(
        "SELECT cs.case_id, cr.target, m.samples, cr.paired_samples, m.round_sizes, cr.binary_digest, "
        "cr.paired_binary_digest FROM case_results cr JOIN cases cs ON cr.case_id = cs.id "
        "JOIN measurements m ON m.case_result_id = cr.id WHERE cr.job_id = ?", job)
    arrays: dict[str, Any] = {}
    meta = []
    for i, (case, target, head_blob, base_blob, rounds, digest, paired_digest) in enumerate(rows):
        arrays[f"h{i}"] = np.asarray(from_blob(head_blob), dtype=np.float32)
        arrays[f"b{i}"] = np.asarray(from_blob(base_blob) if base_blob is not None else [], dtype=np.float32)
        meta.append({"case": case, "target": target, "rounds": json.loads(rounds) if isinstance(rounds, str) else rounds,
                     "same_binary": digest is not None and digest == paired_digest, "digest": digest})
    np.savez_compressed(path, meta=json.dumps(meta), **arrays)
    return len(rows)


def _stopped(farm: GpuFarm, head: str) -> dict[str, Any]:
    """The newest job of `head`: how many of its timed cases took each number of rounds, and why they stopped."""
    job = farm.query("SELECT j.id FROM jobs j JOIN runs r ON j.run_id = r.id JOIN commits c ON r.commit_id = c.id "
                     "WHERE c.sha = ? ORDER BY j.finished_at DESC LIMIT 1", head)[0][0]
    rounds: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for (environment,) in farm.query("SELECT environment FROM case_results WHERE job_id = ? AND status = 'ok'", job):
        env = json.loads(environment) if isinstance(environment, str) else (environment or {})
        rounds[env.get("rounds", "?")] = rounds.get(env.get("rounds", "?"), 0) + 1
        reasons[env.get("stopped", "?")] = reasons.get(env.get("stopped", "?"), 0) + 1
    return {"rounds": dict(sorted(rounds.items(), key=lambda kv: (len(kv[0]), kv[0]))), "why": reasons}


def run(bundles: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # A copy outside the working tree: the device tool re-sends the tree (and drops what a call does not
    # carry) at every call, which removed the bundles under a run that outlived its first call.
    local = scratch("bf-acceptance-bundles")
    shutil.rmtree(local, ignore_errors=True)
    shutil.copytree(bundles, local)
    bundles = local
    shas = json.loads((bundles / "shas.json").read_text())
    device_class = os.environ.get("ACCEPTANCE_DEVICE_CLASS") or cuda_device_class()
    report: dict[str, Any] = {"device_class": device_class, "shas": shas, "jobs": []}
    farm = GpuFarm(scratch("bf-acceptance"), {"BENCHFARM_COMPARE__SAME_BINARY_SHORTCUT": "false"})
    only = os.environ.get("ACCEPTANCE_STEPS", "nightly,aa,pr,unpaired").split(",")
    # settings of the run-job processes only (BENCHFARM_* as JSON), e.g. a lower placement budget that
    # makes a large GPU time the suite in groups as a small one would
    agent_env: dict[str, str] = json.loads(os.environ.get("ACCEPTANCE_AGENT_ENV", "{}"))
    report["agent_env"] = agent_env
    try:
        def job(label: str, head: str, base: str | None, pr: bool = False, compare_with: str | None = None,
                env: dict[str, str] | None = None) -> None:
            started = time.perf_counter()
            info = farm.run_job(bundles / head, device_class, base=bundles / base if base else None, pr=pr,
                                name=label, extra_env={**agent_env, **(env or {})})
            body, compare_s = farm.compare(shas[head], shas[compare_with] if compare_with else None)
            rows = [r for c in body["comparisons"] for r in c["rows"]]
            report["jobs"].append({
                "label": label, "head": head, "base": base, "pr": pr, "wall_s": round(info["wall_s"], 1),
                "claim_to_comparison_s": round(time.perf_counter() - started, 1), "compare_s": round(compare_s, 2),
                "phases": info["phases"], "verdict": body["verdict"], "summary": info["stdout"].strip()[-300:],
                "counts": {k: v for k, v in body.get("counts", {}).items() if v},
                "flagged": [{k: r.get(k) for k in ("case_id", "change", "ci_low", "ci_high", "pvalue", "status")}
                            for r in rows if r["status"] in ("regressed", "improved") and not r.get("is_control")],
                "rows": [{k: r.get(k) for k in ("case_id", "change", "ci_low", "ci_high", "pvalue", "status", "paired", "threshold")}
                         for r in rows],
            })
            report["jobs"][-1]["stopped"] = _stopped(farm, shas[head])
            if label.startswith(("aa", "nightly", "unpaired")):
                report["jobs"][-1]["dumped"] = _dump(farm, shas[head], out / f"{label}.npz")
            _save(out, report)
            print(f"{label}: {info['wall_s']:.0f} s, {body['verdict']}, phases {info['phases']}", flush=True)

        if "nightly" in only:
            job("nightly-aa1", "readme", "base")
        if "pr" in only:
            job("pr-a-one-tile", "one-tile", "base", pr=True)
            job("pr-b-all-tiles", "all-tiles", "base", pr=True)
        if "rename" in only:   # a pull request whose every Triton binary changed: the PR latency. Over base, whose
            # binaries the nightly checked on this agent (as a farm's agent has checked its main branch's). Their
            # code is the base's (names aside), which a pull request does not time: timed here all the same
            # (measurement.time_same_code), as a commit that changed every kernel's code would be
            job("pr-rename", "rename", "base", pr=True, env={"BENCHFARM_MEASUREMENT__TIME_SAME_CODE": "true"})
            # and as a pull request is: the drift sentinels alone (issue 32: under 60 s of GPU)
            job("pr-rename-same-code", "rename", "base", pr=True)
        if "aa" in only:
            job("aa2", "readme", "base")
            job("aa3", "readme", "base")
        if "unpaired" in only:
            for k in range(int(os.environ.get("ACCEPTANCE_UNPAIRED_RUNS", "2"))):
                variant, before = ("base", "readme") if k % 2 == 0 else ("readme", "base")
                suffix = f"-{k // 2 + 1}" if k >= 2 else ""   # the first pair keeps its earlier names
                job(f"unpaired-{variant}{suffix}", variant, None, compare_with=before if k else None)
    finally:
        farm.stop()
        _save(out, report)


if __name__ == "__main__":
    two_step_main(__doc__ or "", build, run, ".gpu/acc")
