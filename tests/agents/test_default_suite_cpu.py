"""Every llvm-cpu:x86_64 case of the default suite (`kernels/`) builds, runs on this CPU and passes
its correctness check (small measurement settings: this is a correctness gate, not a benchmark)."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from pipeline.agents.devices import cpu_device
from pipeline.agents.local import run_bundle
from pipeline.build.bundle import build_bundle
from pipeline.build.suite_loader import locate_suite, resolve_commit
from pipeline.config import MeasurementSettings
from tests.helpers.default_suite import default_suite_repo

FAST = MeasurementSettings(warmup_s=0.0, min_samples=3, min_time_s=0.0, max_time_s=0.05, rounds=1)


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86_64 host only")
def test_default_suite_cpu_cases_are_correct(tmp_path: Path) -> None:
    repo = default_suite_repo(tmp_path)
    location = locate_suite(repo / "kernels")
    bundle_dir, manifest = build_bundle(
        location=location, sha=resolve_commit(location), targets=["llvm-cpu:x86_64"],
        out_dir=tmp_path / "bundles", cache_dir=tmp_path / "cache", workers=0,
    )
    families = {e.case.split("/")[0] for e in manifest.entries}
    assert {"gemm", "conv", "attention", "gather-scatter"} <= families
    device = cpu_device()
    assert device is not None
    document = run_bundle(bundle_dir=bundle_dir, manifest=manifest, device=device, run_id="ci", job_id="cpu",
                          settings=FAST)
    bad = [f"{r.case}: {r.status} {r.reason}" for r in document.results if r.status != "ok"]
    assert not bad, "\n".join(bad)
    assert len(document.results) == len(manifest.entries)
