"""The suite's CUDA cases beside the vendor controls on one NVIDIA GPU, in one run (issue 3, item 5).

    .venv/bin/python bench/suite_vs_vendor.py build --out .gpu/svv        # here: Triton 3.9 on the CPU
    python3 bench/suite_vs_vendor.py run --bundles .gpu/svv --out $OUT     # on the GPU host

`build` compiles this checkout's suite (HEAD) for cuda:sm_90 (Triton cases and vendor entries).
`run` times every entry through `run_bundle` (cold L2, CUDA events; vendor controls as CUDA-graph
replays) and measures the roofline's two ceilings in the same process: compute = the fastest vendor
bf16 GEMM of the run (cuBLAS; the 8192^3 square is the large one), bandwidth = a 2 GiB device-to-device
copy (torch `copy_`, bytes read + written, CUDA events, median of 20). Table per suite case: latency,
TFLOP/s, GB/s, % of roofline (achieved FLOP/s over min(peak FLOP/s, intensity x peak bandwidth)),
vendor latency, vendor / ours, and for the large shapes the target and whether it is met: GEMM >= 0.9x
cuBLAS, attention forward >= 0.8x SDPA's best backend, conv >= 0.8x cuDNN, gather/scatter >= 80% of
the measured copy bandwidth.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _two_step import two_step_main  # noqa: E402

from pipeline.contracts.ids import CaseId  # noqa: E402

COPY_BYTES = 2 << 30


def build(out: Path) -> None:
    from pipeline.build.bundle import build_bundle
    from pipeline.build.suite_loader import locate_suite, resolve_commit

    location = locate_suite(ROOT / "kernels")
    bundle_dir, manifest = build_bundle(location=location, sha=resolve_commit(location), targets=["cuda:sm_90"],
                                        out_dir=out.resolve(), cache_dir=out.resolve() / "cache", workers=0)
    failed = [e.case for e in manifest.entries if e.status == "failed"]
    (out / "bundle.json").write_text(json.dumps({"bundle": bundle_dir.name}))
    print(f"built {bundle_dir.name}: {len(manifest.entries)} entries, {len(failed)} failed {failed}")


def large(case: str, flops: int, nbytes: int) -> str | None:
    """The target of a large shape (None for the others)."""
    c = CaseId.parse(case)
    family, name, shape = c.family, c.name, c.shape
    if family == "gemm" and (shape.startswith("4096x") or shape.startswith("8192x")):
        return "gemm"
    if family == "attention" and "prefill" in name and ("Sq8192" in shape or "Sq16384" in shape):
        return "attention"
    if family == "conv" and shape.startswith("32x"):
        return "conv"
    if family == "gather-scatter" and nbytes >= 32 << 20:
        return "gather-scatter"
    return None


TARGETS = {"gemm": 0.9, "attention": 0.8, "conv": 0.8, "gather-scatter": 0.8}


def copy_bandwidth() -> tuple[float, list[float]]:
    import torch

    src = torch.empty(COPY_BYTES // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(23):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) * 1e-3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * COPY_BYTES / statistics.median(times), times


def run(bundles: Path, out: Path) -> None:
    from pipeline.agents.devices import nvidia_devices
    from pipeline.agents.local import run_bundle
    from pipeline.build.bundle import load_bundle
    from pipeline.config import MeasurementSettings

    bundle_dir = bundles / json.loads((bundles / "bundle.json").read_text())["bundle"]
    manifest = load_bundle(bundle_dir)
    device = nvidia_devices()[0]
    print(f"device: {device.info.name} ({device.info.uid}), driver {device.info.driver}", flush=True)
    bandwidth, copies = copy_bandwidth()
    print(f"copy: {bandwidth / 1e9:.0f} GB/s (2 GiB, read + write, median of {len(copies)})", flush=True)
    settings = MeasurementSettings(warmup_s=0.03, min_samples=10, min_time_s=0.05, max_time_s=0.25, rounds=1,
                                   device_overrides={})
    t0 = time.time()

    def progress(what: str, done: int, total: int) -> None:
        if done == total or done % 25 == 0:
            print(f"{time.time() - t0:5.0f} s {what[:60]} {done}/{total}", flush=True)

    doc = run_bundle(bundle_dir=bundle_dir, manifest=manifest, device=device, run_id="svv", job_id="j", settings=settings,
                     progress=progress)
    print(f"run_bundle: {len(doc.results)} entries in {time.time() - t0:.0f} s", flush=True)
    (out / "suite_vs_vendor_result.json").write_text(doc.model_dump_json())
    entries = {e.case: e for e in manifest.entries}
    by = {r.case: r for r in doc.results}
    ids = {case: CaseId.parse(case) for case in by}
    gemm_vendor = [entries[c].flops / r.stats.median for c, r in by.items()
                   if ids[c].family == "gemm" and ids[c].impl == "vendor" and r.stats]
    peak = max(gemm_vendor)
    ridge = peak / bandwidth
    lines = [f"peaks measured in this run: compute {peak / 1e12:.0f} TFLOP/s (fastest cuBLAS bf16 GEMM), "
             f"bandwidth {bandwidth / 1e9:.0f} GB/s (2 GiB D2D copy); ridge {ridge:.0f} FLOP/B", "",
             "| case | shape | ours us | TFLOP/s | GB/s | % roofline | vendor us | vendor/ours | target | met | bound |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    not_ok = []
    for case, r in by.items():
        c = ids[case]
        fam, name, shape, impl = c.family, c.name, c.shape, c.impl
        if impl == "vendor":
            continue
        if r.status != "ok" or r.stats is None:
            not_ok.append(f"{case}: {r.status} {(r.reason or '')[:200]}")
            continue
        e = entries[case]
        t = r.stats.median
        tf, gbs = e.flops / t, e.bytes / t
        intensity = e.flops / e.bytes if e.bytes else float("inf")
        attainable = min(peak, intensity * bandwidth) if e.flops else bandwidth
        achieved = tf if e.flops else gbs
        roof = achieved / attainable
        v = by.get(str(c.model_copy(update={"impl": "vendor"})))
        vt = v.stats.median if v is not None and v.stats is not None else None
        ratio = vt / t if vt else None
        kind = large(case, e.flops, e.bytes)
        target, met = "", ""
        if kind == "gather-scatter":
            target, met = ">=80% copy BW", "yes" if gbs >= 0.8 * bandwidth else "no"
        elif kind and ratio is not None:
            target, met = f">={TARGETS[kind]}x vendor", "yes" if ratio >= TARGETS[kind] else "no"
        bound = "compute" if e.flops and intensity >= ridge else "memory"
        backend = v.environment.get("sdpa_backend", v.environment.get("library", "")) if v is not None else ""
        lines.append(f"| {fam}/{name} {impl} | {shape} | {t * 1e6:.1f} | {tf / 1e12:.1f} | {gbs / 1e9:.0f} | "
                     f"{roof * 100:.0f}% | {vt * 1e6 if vt else float('nan'):.1f} {backend} | "
                     f"{ratio if ratio else float('nan'):.2f} | {target} | {met} | {bound} (AI {intensity:.0f}) |")
    timing = {r.environment.get("timing", "") for r in doc.results if ids[r.case].impl == "vendor" and r.status == "ok"}
    throttled = sum(int(r.environment.get("throttled_samples_discarded", "0")) for r in doc.results)
    lines += ["", f"vendor timing: {sorted(timing)}; throttled samples discarded: {throttled}"]
    lines += [f"not ok: {x}" for x in not_ok]
    lines += [f"vendor not ok: {r.case}: {r.status} {(r.reason or '')[:200]}" for r in doc.results
              if ids[r.case].impl == "vendor" and r.status != "ok"]
    text = "\n".join(lines)
    print(text, flush=True)
    (out / "suite_vs_vendor.md").write_text(text + "\n")


def main() -> None:
    two_step_main(__doc__ or "", build, run, bundles=".gpu/svv")


if __name__ == "__main__":
    main()
