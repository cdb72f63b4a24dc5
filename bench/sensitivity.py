"""Sensitivity on the real suite (issue 11, item 5): slowdowns of about 1, 2, 3, 5 and 10 % injected
by a real code change into one case of each kind (compute-bound prefill GEMM, memory-bound decode
GEMM, attention, gather/scatter, conv), judged paired and unpaired, three repetitions each, through
real `benchfarm serve` + `benchfarm run-job` processes.

Two steps (the GPU host has no Triton 3.9 and no network):

    .venv/bin/python bench/sensitivity.py build --out .gpu/sens      # here: base + one commit per level
    python3 bench/sensitivity.py run --bundles .gpu/sens --out $OUT   # on the GPU host (with .whl)
    .venv/bin/python bench/sensitivity.py summary sensitivity.json [more.json ...]   # the table

The change: each chosen case runs a copy of its kernel (`<family>/<kernel module>_slow.py`) that
ends every program with SPIN dependent integer steps, kept alive by a store that never happens.
SPIN is sized from an estimate of the case's time on an H100 and its waves of programs (from the
base manifest's grid, threads, shared memory and registers), so the nominal level is only aimed
at: the table reports the change each level really made (the mean of its paired measurements),
and detection is judged against that. Every other case is untouched (same binaries as the base).

`run`: the service runs with default settings but the identical-binary shortcut off, so that the
pull-request jobs' drift sentinels are judged as if they had changed (each is a possible false
alarm). Per repetition: for each level a pull request's paired step (level over base: the five
changed cases and the sentinels timed), then unpaired: the base alone and each level alone with
`--cases` the five cases, each level compared with that base. Figures go to OUT/sensitivity.json as
they come.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _gpu_farm import GpuFarm, build_variants, cuda_device_class, scratch  # noqa: E402
from _two_step import two_step_main  # noqa: E402

# kind -> (suite folder, kernel module, kernel function, pointer the keep-alive store names, case id,
# estimated time on an H100 in seconds: BENCHMARKS.md "Suite vs vendor" (H200) with memory-bound
# cases scaled by the bandwidth ratio 4.8 / 3.35)
KINDS: dict[str, tuple[str, str, str, str, str, float]] = {
    "prefill GEMM": ("gemm", "triton_kernel", "matmul_kernel", "c_ptr",
                     "gemm/llama3-8b-o-proj-prefill/4096x4096x4096/bf16/triton", 197e-6),
    "decode GEMM": ("gemm", "triton_kernel", "matmul_kernel", "c_ptr",
                    "gemm/llama3-8b-qkv-proj-decode/1x6144x4096/bf16/triton", 34e-6),
    "attention": ("attention", "triton_kernel", "attn_fwd_kernel", "o_ptr",
                  "attention/llama3.2-1b-prefill/B1-Sq2048-Skv2048-Hq32-Hkv8-D64/bf16/triton", 50e-6),
    "conv": ("conv", "triton_kernel", "conv2d_implicit_gemm_kernel", "y_ptr",
             "conv/resnet50-conv2-3x3/32x56x56x64-64x3x3-s1/bf16/triton", 40e-6),
    "gather/scatter": ("gather_scatter", "triton_kernel", "gather_rows_kernel", "out_ptr",
                       "gather-scatter/mixtral-8x7b-moe-dispatch/4096x8192x4096/bf16/triton", 43e-6),
}
LEVELS = (1, 2, 3, 5, 10)           # nominal slowdowns, %
SPIN_STEP_S = 4.5e-9                # one dependent IMAD + LOP3 step at ~1.75 GHz (estimate)
SMS = 132                           # H100 SXM / H200
REPETITIONS = int(os.environ.get("SENSITIVITY_REPETITIONS", "3"))
FIRST_REPETITION = int(os.environ.get("SENSITIVITY_FIRST_REPETITION", "1"))   # to go on from a cut-off run

_SPIN_BLOCK = '''
    # sensitivity bench: SPIN dependent integer steps per program (a real slowdown), kept alive by a
    # store that never happens
    spin_x = tl.program_id(0) + 1
    for _ in range(SPIN):
        spin_x = (spin_x * 1103515245 + 12345) ^ (spin_x >> 3)
    tl.store({ptr}, spin_x.to({ptr}.dtype.element_ty), mask=spin_x == 1234567)
'''

_CASES_HOOK = '''

# ---- sensitivity bench (bench/sensitivity.py): chosen cases run a slowed copy of their kernel ----
import dataclasses as _sens_dc  # noqa: E402

_SENSITIVITY = {spins!r}
_sens_plain_cases = cases


def _sens_slowed(make, spin):
    def make_source(target):
        source = make(target)
        return _sens_dc.replace(source, module=source.module + "_slow", constexprs={{**source.constexprs, "SPIN": spin}})
    return make_source


def cases():
    return [_sens_dc.replace(c, make_source=_sens_slowed(c.make_source, _SENSITIVITY[str(c.case_id)]))
            if str(c.case_id) in _SENSITIVITY else c for c in _sens_plain_cases()]
'''


def slowed_kernel(text: str, function: str, ptr: str) -> str:
    """The kernel module's text with `function` taking a SPIN constexpr (last parameter) and ending
    with the spin block."""
    start = text.index(f"def {function}(")
    close = text.index("\n):", start)
    text = text[:close] + "\n    SPIN: tl.constexpr," + text[close:]
    nxt = text.find("\n@triton.jit", close)
    end = len(text) if nxt < 0 else nxt
    body = text[:end].rstrip("\n") + "\n"
    return body + _SPIN_BLOCK.format(ptr=ptr) + ("\n\n" + text[end:].lstrip("\n") if nxt >= 0 else "")


def occupancy(threads: int, shared: int, registers: int | None) -> int:
    """Resident programs per SM on Hopper: limited by threads, shared memory and registers."""
    limits = [32, 2048 // max(threads, 1)]
    if shared:
        limits.append((228 * 1024) // shared)
    if registers:
        limits.append(65536 // (registers * threads))
    return max(1, min(limits))


def spins(base_manifest: dict[str, Any], level: float) -> dict[str, int]:
    """Case id -> SPIN aimed at `level` % more time."""
    entries = {e["case"]: e for e in base_manifest["entries"] if e["target"] == "cuda:sm_90" and e["status"] == "built"}
    out = {}
    for _kind, (_folder, _module, _fn, _ptr, case, est_s) in KINDS.items():
        entry = entries[case]
        launch, stats = entry["launch"], entry.get("compile") or {}
        programs = 1
        for g in launch["grid"]:
            programs *= g
        occ = occupancy(launch["threads"], launch.get("shared_bytes") or 0, stats.get("registers"))
        waves = max(1.0, programs / (SMS * occ))
        out[case] = max(1, round(level / 100 * est_s / (waves * SPIN_STEP_S)))
    return out


def _level_edit(out: Path, level: float):
    """Each chosen case's kernel module copied to `<module>_slow.py` with its function slowed (two
    kinds may share a module and function: the GEMMs), and the cases files' hooks with SPIN."""
    def edit(repo: Path) -> None:
        manifest = json.loads(next((out / "base").glob("*/manifest.json")).read_text())
        chosen = spins(manifest, level)
        slowed: dict[tuple[str, str], dict[str, str]] = {}   # (folder, module) -> function -> pointer
        per_folder: dict[str, dict[str, int]] = {}
        for folder, module, function, ptr, case, _ in KINDS.values():
            slowed.setdefault((folder, module), {})[function] = ptr
            per_folder.setdefault(folder, {})[case] = chosen[case]
        for (folder, module), functions in slowed.items():
            text = (repo / "kernels" / folder / f"{module}.py").read_text()
            for function, ptr in functions.items():
                text = slowed_kernel(text, function, ptr)
            (repo / "kernels" / folder / f"{module}_slow.py").write_text(text)
        for folder, cases in per_folder.items():
            path = repo / "kernels" / folder / "triton_cases.py"
            path.write_text(path.read_text() + _CASES_HOOK.format(spins=cases))
        subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)   # the new kernel copies
    return edit


README_EDIT = "an edit that changes no kernel (the calibration jobs' head)"


def build(out: Path) -> None:
    variants = {"base": lambda repo: None, **{f"level-{lv}": _level_edit(Path(out), lv) for lv in LEVELS},
                "readme": lambda repo: (repo / "README.md").write_text(README_EDIT + "\n")}
    build_variants(out, variants, target="cuda:sm_90", from_first=True)
    base = json.loads(next((Path(out) / "base").glob("*/manifest.json")).read_text())
    digests = {e["case"]: e["artifact"]["sha256"] for e in base["entries"] if e.get("artifact")}
    plan = {}
    for lv in LEVELS:
        manifest = json.loads(next((Path(out) / f"level-{lv}").glob("*/manifest.json")).read_text())
        changed = sorted(e["case"] for e in manifest["entries"]
                         if e.get("artifact") and digests.get(e["case"]) != e["artifact"]["sha256"])
        failed = [e["case"] for e in manifest["entries"] if e["status"] != "built"
                  and any(fnmatch.fnmatchcase(e["case"], k[4]) for k in KINDS.values())]
        wanted = sorted(k[4] for k in KINDS.values())
        if changed != wanted or failed:
            raise SystemExit(f"level {lv}: changed {changed}, failed {failed}; expected exactly {wanted}")
        plan[lv] = spins(base, lv)
    (Path(out) / "plan.json").write_text(json.dumps({"levels": plan, "kinds": {k: v[4] for k, v in KINDS.items()}},
                                                    indent=1))
    print(json.dumps(plan, indent=1))


def _save(out: Path, report: dict[str, Any]) -> None:
    partial = out / "sensitivity.json.tmp"
    partial.write_text(json.dumps(report, indent=1))
    os.replace(partial, out / "sensitivity.json")


def _rows(body: dict[str, Any]) -> list[dict[str, Any]]:
    keep = ("case_id", "change", "ci_low", "ci_high", "pvalue", "status", "paired", "threshold", "is_control")
    return [{k: r.get(k) for k in keep} for c in body["comparisons"] for r in c["rows"]]


def run(bundles: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    local = scratch("bf-sensitivity-bundles")   # outside the tree the device tool re-sends
    shutil.rmtree(local, ignore_errors=True)
    shutil.copytree(bundles, local)
    shas = json.loads((local / "shas.json").read_text())
    plan = json.loads((local / "plan.json").read_text())
    chosen = ",".join(plan["kinds"].values())
    device_class = os.environ.get("ACCEPTANCE_DEVICE_CLASS") or cuda_device_class()
    report: dict[str, Any] = {"device_class": device_class, "plan": plan, "shas": shas, "jobs": []}
    farm = GpuFarm(scratch("bf-sensitivity"), {"BENCHFARM_COMPARE__SAME_BINARY_SHORTCUT": "false"})
    modes = os.environ.get("SENSITIVITY_MODES", "paired,unpaired").split(",")

    def job(label: str, head: str, base: str | None, *, pr: bool, cases: str | None, compare_with: str | None) -> None:
        info = farm.run_job(local / head, device_class, base=local / base if base else None, pr=pr, name=label,
                            cases=cases)
        body, _ = farm.compare(shas[head], shas[compare_with] if compare_with else None)
        report["jobs"].append({"label": label, "head": head, "wall_s": round(info["wall_s"], 1),
                               "verdict": body["verdict"], "rows": _rows(body)})
        _save(out, report)
        flagged = [(r["case_id"], r["change"]) for r in _rows(body) if r["status"] in ("regressed", "improved")]
        print(f"{label}: {info['wall_s']:.0f} s, {body['verdict']}, flagged {flagged}", flush=True)

    try:
        # A farm learns each case's paired noise from its A/A calibrations (identical binaries timed paired:
        # nightlies, drift sentinels); with 5 of them a case's threshold follows its noise down to the paired
        # floor. SENSITIVITY_CALIBRATE such jobs of the chosen cases first (0: judge on a fresh store).
        for k in range(int(os.environ.get("SENSITIVITY_CALIBRATE", "5"))):
            job(f"calibrate-{k + 1}", "readme", "base", pr=False, cases=chosen, compare_with=None)
        for rep in range(FIRST_REPETITION, REPETITIONS + 1):
            if "paired" in modes:
                for lv in LEVELS:
                    job(f"paired-{lv}-r{rep}", f"level-{lv}", "base", pr=True, cases=None, compare_with=None)
            if "unpaired" in modes:
                job(f"unpaired-base-r{rep}", "base", None, pr=False, cases=chosen, compare_with=None)
                for lv in LEVELS:
                    job(f"unpaired-{lv}-r{rep}", f"level-{lv}", None, pr=False, cases=chosen, compare_with="base")
    finally:
        farm.stop()
        _save(out, report)
    summarise(out / "sensitivity.json")


def summarise(path: Path, *more: Path) -> None:
    """Print the markdown table: per kind and level, the measured change and how often it was flagged.
    With `more` reports of the same plan (a cut-off run gone on with SENSITIVITY_FIRST_REPETITION and
    SENSITIVITY_MODES, from bundles built again: other commits, the same cases and SPIN levels), their
    jobs count too."""
    report = json.loads(Path(path).read_text())
    for other in map(json.loads, (Path(p).read_text() for p in more)):
        if other["plan"] != report["plan"]:
            raise SystemExit("the reports follow different plans (cases or SPIN levels differ): not one table")
        report["jobs"] += other["jobs"]
    kinds = report["plan"]["kinds"]
    table: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    false_alarms: dict[str, list[str]] = {"paired": [], "unpaired": []}
    for job in report["jobs"]:
        mode, level = job["label"].split("-")[0], job["label"].split("-")[1]
        if level == "base" or mode == "calibrate":
            continue
        for row in job["rows"]:
            if row["is_control"]:
                continue
            kind = next((k for k, c in kinds.items() if c == row["case_id"]), None)
            if kind is None:
                if row["status"] in ("regressed", "improved"):
                    false_alarms[mode].append(f"{job['label']} {row['case_id']} {row['change']}")
                continue
            table.setdefault((kind, level, mode), []).append(row)
    print("| kind | nominal | measured change (paired mean) | paired: flagged / runs, changes | "
          "unpaired: flagged / runs, changes |")
    print("|---|---|---|---|---|")
    for kind in kinds:
        for lv in (str(x) for x in LEVELS):
            paired = table.get((kind, lv, "paired"), [])
            unpaired = table.get((kind, lv, "unpaired"), [])
            changes = [r["change"] for r in paired if r["change"] is not None]
            mean = sum(changes) / len(changes) if changes else float("nan")

            def cell(rows: list[dict[str, Any]]) -> str:
                hit = sum(r["status"] == "regressed" for r in rows)
                same = sum(r["status"] == "similar" for r in rows)
                text = ", ".join(f"{100 * r['change']:+.1f}" if r["change"] is not None else r["status"] for r in rows)
                return f"{hit} / {len(rows)}{f' ({same} similar)' if same else ''} ({text})"
            print(f"| {kind} | {lv} % | {100 * mean:+.2f} % | {cell(paired)} | {cell(unpaired)} |")
    for mode, items in false_alarms.items():
        print(f"false alarms, {mode}: {len(items)} {items}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "summary":
        summarise(*map(Path, sys.argv[2:]))
    else:
        two_step_main(__doc__ or "", build, run, ".gpu/sens")
