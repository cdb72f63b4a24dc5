"""Measurement quality on an NVIDIA GPU (issue 5 acceptance): A/A and A/B through the store's verdict,
paired and unpaired, and the per-case noise beside NVBench's method.

Two steps, because the GPU host has no Triton 3.9 and no network:

    .venv/bin/python bench/measurement_quality.py build --out .gpu/mq      # here, on the CPU builder
    python3 bench/measurement_quality.py run --bundles .gpu/mq --out $OUT   # on the GPU host

`build` makes a git repository with a Triton GEMM suite at two commits and compiles both for
cuda:sm_90. The kernel is the suite's own (`kernels/gemm/triton_kernel.py`) with one constexpr added,
EXTRA_K_BLOCKS: the K loop runs that many more BLOCK_K steps, whose loads are masked off (zeros, no
memory traffic) while their `tl.dot`s still run on the tensor cores, so the result is unchanged and
the extra time is real matrix work. The slowed cases are M=N=2048, K=8192 with 128x256 tiles: 128
programs, one wave on 132 SMs, 128 K steps each, so E extra steps cost about E/128 of the time
(3 -> 2.3 %, 4 -> 3.1 %, 7 -> 5.5 %, 13 -> 10.2 %); the exact change is measured in the same run
(the median paired ratio). Base: every case at 0 extra steps; head: g2/g3/g5/g10 slowed, `ctrl`
(4096^3) unchanged.

`run` (in-process, SQLite store under /tmp):
- paired A/A: the base bundle timed interleaved with itself (the head side relabelled as a child
  commit), REPS times; every case must come out `similar` in `compare`;
- paired A/B: head interleaved with base, REPS times: g3, g5, g10 must be `regressed` every time;
  g2 is reported with its figure;
- unpaired: base alone and head alone, REPS times each; A/B and A/A (run r vs run r-1) through
  `compare` with an explicit base (Mann-Whitney);
- noise: the relative spread (stdev / mean) across repetitions of each case's median (unpaired) and
  of its median paired ratio (paired), beside NVBench's noise figure for the same kernel, computed
  with NVBench's method in our runner (cold L2, CUDA events, relative stdev of the samples, stop
  at 0.5 % after 0.5 s of GPU time and 10 samples, 15 s timeout, throttle discard at 75 %): NVBench's
  method, not NVBench's binary (no NVBench on the GPU host).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _two_step import two_step_main  # noqa: E402

from pipeline.contracts.ids import CaseId  # noqa: E402

SLOWED = {"g2": 3, "g3": 4, "g5": 7, "g10": 13}     # name -> extra K steps of 64 (of 128)
SLOW_SHAPE = (2048, 2048, 8192)
CTRL_SHAPE = (4096, 4096, 4096)
REPS = 3
AA_SHA = "a" * 40
TILE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8)

_INIT = '''\
"""Measurement-quality GEMM suite: the suite's Triton GEMM with EXTRA_K_BLOCKS masked K steps."""
from pipeline.build.suite_api import KernelCase, Pointer, Scalar, TritonSource
from pipeline.contracts.ids import CaseId
from pipeline.contracts.manifest import ReferenceSpec, ReferenceSubset, TensorSpec

CASES = {cases!r}
TILE = {tile!r}


def source(m, n, k, extra):
    programs = (m // TILE["BLOCK_M"]) * (n // TILE["BLOCK_N"])
    return TritonSource(
        module="triton_kernel", function="matmul_kernel",
        args={{
            "a_ptr": Pointer("a", "bf16"), "b_ptr": Pointer("b", "bf16"), "c_ptr": Pointer("c", "bf16"),
            "M": Scalar(m), "N": Scalar(n), "K": Scalar(k),
            "stride_am": Scalar(k), "stride_ak": Scalar(1), "stride_bk": Scalar(n), "stride_bn": Scalar(1),
            "stride_cm": Scalar(n), "stride_cn": Scalar(1),
        }},
        constexprs={{**TILE, "EXTRA_K_BLOCKS": extra}},
        grid=(programs,), num_warps=8, num_stages=3,
    )


def case(name, m, n, k, extra):
    return KernelCase(
        case_id=CaseId(family="gemm", name=name, shape=f"{{m}}x{{n}}x{{k}}", dtype="bf16", impl="triton"),
        model="measurement-quality",
        targets=("cuda:sm_90",),
        tensors=(
            TensorSpec(name="a", role="input", shape=[m, k], dtype="bf16", init="normal"),
            TensorSpec(name="b", role="input", shape=[k, n], dtype="bf16", init="normal"),
            TensorSpec(name="c", role="output", shape=[m, n], dtype="bf16", init="none"),
        ),
        arguments=("a", "b"),
        results=("c",),
        reference=ReferenceSpec(module="reference", function="matmul", atol=1e-2, rtol=1e-2,
                                subset=ReferenceSubset(axis=0, count=64)),
        flops=2 * m * n * k,
        bytes=2 * (m * k + k * n + m * n),
        make_source=lambda target, m=m, n=n, k=k, extra=extra: source(m, n, k, extra),
    )


def cases():
    return [case(*c) for c in CASES]
'''

_REFERENCE = '''\
import numpy as np


def matmul(a, b, index=None):
    a = np.asarray(a, dtype=np.float64)
    return (a if index is None else a[index]) @ np.asarray(b, dtype=np.float64)
'''


def _kernel_text() -> str:
    text = (ROOT / "kernels" / "gemm" / "triton_kernel.py").read_text()
    loop = "for k in range(0, tl.cdiv(K, BLOCK_K)):"
    param = "    GROUP_M: tl.constexpr,\n"
    if loop not in text or param not in text:
        raise SystemExit("kernels/gemm/triton_kernel.py changed: update measurement_quality's EXTRA_K_BLOCKS edit")
    text = text.replace(param, param + "    EXTRA_K_BLOCKS: tl.constexpr,   # masked K steps: real MMAs on zeros\n")
    return text.replace(loop, "for k in range(0, tl.cdiv(K, BLOCK_K) + EXTRA_K_BLOCKS):")


def _files(extra: dict[str, int]) -> dict[str, str]:
    rows = [(name, *SLOW_SHAPE, extra.get(name, 0)) for name in SLOWED] + [("ctrl", *CTRL_SHAPE, 0)]
    return {"kernels/__init__.py": _INIT.format(cases=rows, tile=TILE), "kernels/triton_kernel.py": _kernel_text(),
            "kernels/reference.py": _REFERENCE}


def build(out: Path) -> None:
    from pipeline.build.bundle import build_bundle
    from pipeline.build.suite_loader import locate_suite
    from tests.helpers.suite_repo import commit_all, make_suite_repo, write_files

    out = out.resolve()
    repo = make_suite_repo(out / "work", _files({}), name="mq-repo", message="base")
    location = locate_suite(repo / "kernels")
    base_sha = commit_all(repo, "base (no-op)")
    dirs = {}
    for label, sha in (("base", base_sha), ("head", None)):
        if sha is None:
            write_files(repo, _files(SLOWED))
            sha = commit_all(repo, "slow g2/g3/g5/g10 by extra masked K steps")
        bundle_dir, manifest = build_bundle(location=location, sha=sha, targets=["cuda:sm_90"], out_dir=out,
                                            cache_dir=out / "work" / "cache", workers=4, repository="mq-repo")
        bad = [e.case for e in manifest.entries if e.status != "built"]
        if bad:
            raise SystemExit(f"{label}: not built: {bad}")
        dirs[label] = bundle_dir.name
    (out / "bundles.json").write_text(json.dumps(dirs))
    print(f"built {dirs} under {out}")


# ---- on the GPU -------------------------------------------------------------------------------------

def _settings(**changes: object):
    from pipeline.config import MeasurementSettings

    values: dict[str, object] = dict(warmup_s=0.1, min_samples=10, min_time_s=0.1, max_time_s=2.0,
                                     rounds=5, device_overrides={})
    return MeasurementSettings(**{**values, **changes})


NVBENCH = dict(warmup_s=0.1, min_samples=10, min_time_s=0.5, max_time_s=15.0,
               throttle_threshold=0.75, throttle_backoff_s=0.05, rounds=1)
NVBENCH_MAX_REL_STDEV = 0.005
"""NVBench's stopping criterion: the samples' relative standard deviation at most 0.5 %."""


class Store:
    """A SQLite store with the two commits (and the relabelled ones) recorded, one run per document."""

    def __init__(self, path: Path, base, head, device) -> None:
        from pipeline.contracts.commits import CommitInfo
        from pipeline.results.store import ingest
        from pipeline.results.store.db import open_store, session_scope

        self.engine, self.ingest, self.scope, self.device = open_store(f"sqlite:///{path}"), ingest, session_scope, device
        self.repo = base.repository
        now = datetime.now(timezone.utc)
        self.shas = {"base": base.commit, "head": head.commit, "aa": AA_SHA}
        extra = {f"ub{r}": f"{r + 1:x}" * 40 for r in range(REPS)} | {f"uh{r}": f"{r + 10:x}"[-1] * 39 + "e" for r in range(REPS)}
        self.shas |= extra
        commits = [CommitInfo(sha=base.commit, committed_at=now)]
        commits += [CommitInfo(sha=s, parents=[base.commit], committed_at=now) for k, s in self.shas.items() if k != "base"]
        with session_scope(self.engine) as session:
            ingest.upsert_repository(session, name=self.repo)
            ingest.record_commits(session, repository=self.repo, commits=commits)
            ingest.upsert_device_class(session, device.device_class)
            ingest.upsert_device(session, info=device.info)
            for manifest, where in ((base, "base"), (head, "head")):
                ingest.ingest_manifest(session, manifest=manifest, path=where)

    def add(self, document) -> None:
        with self.scope(self.engine) as session:
            run = self.ingest.create_run(session, repository=self.repo, commit_sha=document.commit, kind="adhoc",
                                         device_classes=[self.device.device_class.name])
            document = document.model_copy(update={"run_id": run.id, "job_id": run.jobs[0].id})
        with self.scope(self.engine) as session:
            self.ingest.ingest_result(session, document=document, analysis=None)

    def compare(self, head_sha: str, base_sha: str | None = None):
        from pipeline.config import CompareSettings
        from pipeline.results.store.compare import compare

        with self.scope(self.engine) as session:
            return compare(session, repository=self.repo, head_sha=head_sha, device_class=self.device.device_class.name,
                           settings=CompareSettings(), base_sha=base_sha)


def _name(case: CaseId | str) -> str:
    return (CaseId.parse(case) if isinstance(case, str) else case).name


def run(bundles: Path, out: Path) -> None:
    from pipeline.agents.devices import nvidia_devices
    from pipeline.agents.local import run_bundle
    from pipeline.build.bundle import load_bundle

    dirs = json.loads((bundles / "bundles.json").read_text())
    base_dir, head_dir = bundles / dirs["base"], bundles / dirs["head"]
    base, head = load_bundle(base_dir), load_bundle(head_dir)
    device = nvidia_devices()[0]
    print(f"device: {device.info.name} ({device.info.uid}), driver {device.info.driver}", flush=True)
    store = Store(Path("/tmp/mq-store.db"), base, head, device)
    settings = _settings()
    runs: list[dict[str, Any]] = []
    log: dict[str, object] = {"device": device.info.model_dump(), "settings": settings.model_dump(), "runs": runs}
    verdicts: dict[str, dict[str, list]] = {}

    def record(kind: str, document, comparison=None) -> None:
        rows = {_name(r.case_id): (r.status, r.change, r.pvalue, r.paired) for r in (comparison.rows if comparison else [])}
        for name, row in rows.items():
            verdicts.setdefault(kind, {}).setdefault(name, []).append(row)
        runs.append({"kind": kind, "results": [r.model_dump() for r in document.results],
                     "rows": rows})
        summary = ", ".join(f"{n} {s} {c * 100:+.2f}%" if c is not None else f"{n} {s}" for n, (s, c, _, _) in rows.items())
        print(f"{kind}: {summary}", flush=True)

    t0 = time.time()
    for r in range(REPS):
        aa = run_bundle(bundle_dir=base_dir, manifest=base.model_copy(update={"commit": AA_SHA}), device=device,
                        run_id=f"aa{r}", job_id="j", settings=settings, base_bundle_dir=base_dir, base_manifest=base)
        store.add(aa)
        record("paired A/A", aa, store.compare(AA_SHA))
        ab = run_bundle(bundle_dir=head_dir, manifest=head, device=device, run_id=f"ab{r}", job_id="j",
                        settings=settings, base_bundle_dir=base_dir, base_manifest=base)
        store.add(ab)
        record("paired A/B", ab, store.compare(head.commit))
    print(f"paired: {time.time() - t0:.0f} s", flush=True)
    t0 = time.time()
    for r in range(REPS):
        ub = run_bundle(bundle_dir=base_dir, manifest=base.model_copy(update={"commit": store.shas[f"ub{r}"]}),
                        device=device, run_id=f"ub{r}", job_id="j", settings=settings)
        store.add(ub)
        uh = run_bundle(bundle_dir=head_dir, manifest=head.model_copy(update={"commit": store.shas[f"uh{r}"]}),
                        device=device, run_id=f"uh{r}", job_id="j", settings=settings)
        store.add(uh)
        record("unpaired A/B", uh, store.compare(store.shas[f"uh{r}"], base_sha=store.shas[f"ub{r}"]))
        if r:
            record("unpaired A/A", ub, store.compare(store.shas[f"ub{r}"], base_sha=store.shas[f"ub{r - 1}"]))
        else:
            record("unpaired base", ub)
    print(f"unpaired: {time.time() - t0:.0f} s", flush=True)
    nvbench = _nvbench_noise(base_dir, base, device)
    log["nvbench_method"] = nvbench
    (out / "measurement_quality.json").write_text(json.dumps(log, indent=1, default=str))
    _report(runs, verdicts, nvbench, out)


def _nvbench_noise(base_dir: Path, base, device) -> dict[str, dict[str, float]]:
    """NVBench's noise figure for each distinct kernel (g2 stands for the four identical base kernels)."""
    import numpy as np

    from pipeline.agents.local import _References, _prepare, _runner
    from pipeline.agents.measure import measure, rel_stdev
    from pipeline.config import MeasurementSettings
    from pipeline.contracts import CaseResult

    runner = _runner(device)
    refs = _References(base_dir / base.suite_source)
    settings = MeasurementSettings(**NVBENCH, device_overrides={})
    out = {}
    for entry in base.entries:
        if _name(entry.case) not in ("g2", "ctrl"):
            continue
        kernel = _prepare(runner, base_dir, entry, refs, "nvbench", "j")
        if isinstance(kernel, CaseResult):
            raise SystemExit(f"{entry.case}: {kernel.status} ({kernel.reason})")
        t = time.time()
        m = measure(kernel.read, settings, default_clock_mhz=kernel.default_clock_mhz,
                    max_rel_stdev=NVBENCH_MAX_REL_STDEV)
        kernel.release()
        s = m.samples
        out[_name(entry.case)] = {"n": len(s), "mean_us": float(np.mean(s) * 1e6), "median_us": float(np.median(s) * 1e6),
                                  "rel_stdev": rel_stdev(s), "gpu_time_s": float(sum(s)), "wall_s": time.time() - t,
                                  "throttled": m.throttled}
        print(f"NVBench method {entry.case}: {out[_name(entry.case)]}", flush=True)
    return out


def _report(runs: list, verdicts: dict, nvbench: dict, out: Path) -> None:
    lines = ["", "## verdicts (store's compare; change = head/base - 1; one entry per repetition)"]
    names = [*SLOWED, "ctrl"]
    lines.append("| case | extra K steps | " + " | ".join(k for k in verdicts) + " |")
    lines.append("|---|---|" + "---|" * len(verdicts))
    for n in names:
        cells = []
        for kind in verdicts:
            rows = verdicts[kind].get(n, [])
            cells.append("; ".join(f"{s} {c * 100:+.2f}%" if c is not None else s for s, c, _, _ in rows))
        lines.append(f"| {n} | {SLOWED.get(n, 0)} | " + " | ".join(cells) + " |")
    # noise: spread across repetitions of each case's median (unpaired) and median paired ratio (paired)
    def spread(values: list[float]) -> float:
        return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else float("nan")

    med: dict[str, list[float]] = {n: [] for n in names}
    ratio_aa: dict[str, list[float]] = {n: [] for n in names}
    within: dict[str, list[float]] = {n: [] for n in names}
    for run in runs:
        for r in run["results"]:
            n = _name(r["case"])
            if run["kind"] in ("unpaired base", "unpaired A/A"):
                med[n].append(statistics.median(r["samples"]))
                within[n].append(statistics.stdev(r["samples"]) / statistics.fmean(r["samples"]))
            if run["kind"] == "paired A/A" and r.get("paired_base"):
                ratios = [h / b for b, h in zip(r["paired_base"]["samples"], r["samples"])]
                ratio_aa[n].append(statistics.median(ratios))
    lines += ["", "## noise (relative spread across repetitions; NVBench method = rel. stdev of one run's samples)",
              "| case | unpaired: spread of median | paired: spread of median ratio (A/A) | our samples' rel. stdev | NVBench method: rel. stdev (n, GPU s) |",
              "|---|---|---|---|---|"]
    for n in names:
        nb = nvbench.get("g2" if n in SLOWED else n, {})
        nbs = f"{nb['rel_stdev'] * 100:.2f}% ({nb['n']}, {nb['gpu_time_s']:.2f})" if nb else "-"
        lines.append(f"| {n} | {spread(med[n]) * 100:.3f}% | {spread(ratio_aa[n]) * 100:.3f}% | "
                     f"{statistics.fmean(within[n]) * 100 if within[n] else float('nan'):.2f}% | {nbs} |")
    text = "\n".join(lines)
    print(text, flush=True)
    (out / "measurement_quality.md").write_text(text + "\n")


def main() -> None:
    two_step_main(__doc__ or "", build, run, bundles=".gpu/mq")


if __name__ == "__main__":
    main()
