"""Server time of each web page on a synthetic store, over real HTTP (target: p95 <= 300 ms).

The store is tests/web/demo_store.py's history at scale (no bench/store_scale.py existed when
this was written): `--commits` default-branch commits x `--scale` variants of each case shape
(120 cases at scale 8: GEMM, conv, attention, Triton and IREE, vendor controls) x 2 device
classes, 12 samples per measurement, analysed once; and the demo farm (two agents, three runs of
ad-hoc jobs). The service runs in-process with uvicorn on
loopback (SQLite, or --database-url postgresql://...); each page is fetched `--repeat` times after
one warm-up (its time is the "first" column: the compare page computes its verdicts there and
serves them from its cache afterwards, until the store changes), and the time from request to the
last byte is recorded (loopback adds well under a millisecond). Prints a Markdown table.

    python bench/ui_latency.py [--commits 100] [--scale 8] [--repeat 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.config import Settings  # noqa: E402
from pipeline.results.api import create_app  # noqa: E402
from pipeline.results.db import open_store, session_scope  # noqa: E402
from pipeline.results.models import Case, ChangePoint, Measurement, Sample, Series  # noqa: E402
from tests.helpers.live_server import live_server  # noqa: E402
from tests.web import demo_store  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--scale", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="ui-latency-"))
    engine = open_store(args.database_url or f"sqlite:///{home}/benchfarm.db")
    started = time.perf_counter()
    demo = demo_store.build(engine, commits=args.commits, scale=args.scale, evil=False)
    farm = demo_store.add_farm(engine, demo)
    built = time.perf_counter() - started
    with session_scope(engine) as s:
        sizes = {name: s.scalar(sa.select(sa.func.count()).select_from(model)) for name, model in
                 (("cases", Case), ("series", Series), ("measurements", Measurement), ("samples", Sample),
                  ("change points", ChangePoint))}
        series_id = s.scalar(sa.select(Series.id).join(Case).where(Case.case_id == demo.cases[0]))
        regression = s.scalar(sa.select(ChangePoint.series_id).where(ChangePoint.direction == "regression").limit(1))
    print(f"store: {engine.dialect.name}, {args.commits} commits, built in {built:.0f} s; "
          + ", ".join(f"{v} {k}" for k, v in sizes.items()), file=sys.stderr)

    pages = {
        "dashboard": "/",
        "dashboard, filtered": "/?family=gemm&dtype=bf16&q=4096",
        "series": f"/series/{series_id}",
        "series (with a change point)": f"/series/{regression}",
        "samples of a commit (JSON)": f"/series/{series_id}/samples?sha={demo_store.main_sha(args.commits // 2)}",
        "compare (PR, all device classes)": f"/compare?repository={demo_store.REPO}&pr=7",
        "regressions": "/regressions",
        "roofline": f"/roofline?device_class={demo.device_classes[0]}",
        "devices": "/devices",
        "jobs": "/jobs",
        "a job": f"/jobs/{farm.failed_job}",
    }
    app = create_app(Settings(home=home, log_level="WARNING"), engine)
    rows = []
    with live_server(app) as url, requests.Session() as http:
        for name, path in pages.items():
            t = time.perf_counter()
            assert http.get(url + path, timeout=60).status_code == 200, path
            first = (time.perf_counter() - t) * 1000  # cold: a compare computes its verdicts here
            times = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                response = http.get(url + path, timeout=60)
                times.append((time.perf_counter() - t) * 1000)
                assert response.status_code == 200
            times.sort()
            p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
            rows.append((name, first, statistics.median(times), p95, len(response.content)))
    print("| page | first ms | p50 ms | p95 ms | size |\n|---|---:|---:|---:|---:|")
    for name, first, p50, p95, size in rows:
        print(f"| {name} | {first:.0f} | {p50:.0f} | {p95:.0f} | {size / 1024:.0f} KiB |")
    engine.dispose()


if __name__ == "__main__":
    main()
