"""One-off (not committed): build the test Triton suite on this GPU host and print ncu's real CSV."""
import json, os, subprocess, sys, tempfile
from pathlib import Path
sys.path.insert(0, os.getcwd())
from tests.helpers.suite_repo import make_suite_repo
from tests.helpers.triton_suite import TritonCase, triton_suite_files
from pipeline.build.bundle import build_bundle
from pipeline.build.suite_loader import locate_suite, resolve_commit
from pipeline.agents.counters import NCU_METRICS, find_ncu

tmp = Path(tempfile.mkdtemp())
repo = make_suite_repo(tmp, triton_suite_files([TritonCase("small"), TritonCase("tall", m=1024)]))
loc = locate_suite(repo / "kernels")
bundle_dir, manifest = build_bundle(location=loc, sha=resolve_commit(loc), targets=["cuda:sm_90"],
                                    out_dir=tmp / "bundles", cache_dir=tmp / "cache", workers=2)
plan = tmp / "plan.json"
plan.write_text(json.dumps([{"bundle": str(bundle_dir), "case": str(e.case), "target": e.target, "seed": 7}
                            for e in manifest.entries]))
cmd = [find_ncu(), "--clock-control", "none", "--metrics", ",".join(NCU_METRICS), "--csv", "--print-units", "base",
       sys.executable, "-m", "pipeline.agents.runners.cuda_launch", "--plan", str(plan), "--launched", str(tmp / "l.json")]
done = subprocess.run(cmd, capture_output=True, text=True)
out = Path(os.environ.get("OUT", "."))
(out / "ncu-stdout.txt").write_text(done.stdout)
(out / "ncu-stderr.txt").write_text(done.stderr + f"\nexit {done.returncode}\n" + " ".join(cmd))
print(done.stdout[-3000:]); print(done.stderr[-2000:])
