"""Server time of each web page on a synthetic store, over real HTTP (target: p95 <= 300 ms).

The store is tests/service/web/demo_store.py's history at scale (no bench/store_scale.py existed when
this was written): `--commits` default-branch commits x `--scale` variants of each case shape
(120 cases at scale 8: GEMM, conv, attention, Triton and IREE, vendor controls) x 2 device
classes, 12 samples per measurement, analysed once; and the demo farm (two agents, three runs of
ad-hoc jobs). The service runs in-process with uvicorn on
loopback (SQLite, or --database-url postgresql://...); each page is fetched `--repeat` times after
one warm-up (its time is the "first" column: the compare page computes its verdicts there and
serves them from its cache afterwards, until the store changes), and the time from request to the
last byte is recorded (loopback adds well under a millisecond). Prints a Markdown table.

    python bench/ui_latency.py [--commits 100] [--scale 8] [--repeat 30]

`--on-store URL` times the pages on an existing store instead (e.g. the one
`bench/store_scale.py --keep` leaves: postgresql://root@127.0.0.1:5432/benchfarm_scale), read
only: the dashboard (unfiltered, one family, one family on one device class, a text filter),
`--series` random series (seeded by `--seed`; one with a change point when there is one), the run
of the newest default-branch commit of the first repository and that commit compared with its
parent (every device class; the first one alone; every class's similar rows, page 3, largest
slowdown first), each device class's roofline (and the first by share of the roof, page 2),
regressions, devices and jobs. Same timing and table; the p95/max are over `--repeat` fetches
after the warm-up. The service's start-up heap is frozen first, as `benchfarm serve` does.

    python bench/ui_latency.py --on-store postgresql://root@127.0.0.1:5432/benchfarm_scale --repeat 20
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.config import Settings
from pipeline.contracts.metrics import LATENCY
from pipeline.service.app import create_app, freeze_startup_heap
from pipeline.results.store.db import make_engine, open_store, session_scope
from pipeline.results.store.models import (
    Case,
    ChangePoint,
    Commit,
    CommitParent,
    DeviceClassRow,
    Measurement,
    Repository,
    Run,
    Series,
)
from tests.helpers.live_server import live_server
from tests.service.web import demo_store


def time_pages(app, pages: dict[str, str], repeat: int) -> list[tuple[str, float, float, float, float, int]]:
    """(page, first, p50, p95, max in ms, size in bytes) of each page: one warm-up, then `repeat` fetches."""
    rows = []
    freeze_startup_heap()  # as `benchfarm serve` does just before serving
    with live_server(app) as url, requests.Session() as http:
        for name, path in pages.items():
            t = time.perf_counter()
            assert http.get(url + path, timeout=120).status_code == 200, path
            first = (time.perf_counter() - t) * 1000  # cold: a compare computes its verdicts here
            times = []
            for _ in range(repeat):
                t = time.perf_counter()
                response = http.get(url + path, timeout=120)
                times.append((time.perf_counter() - t) * 1000)
                assert response.status_code == 200
            times.sort()
            p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
            rows.append((name, first, statistics.median(times), p95, times[-1], len(response.content)))
            print(f"  {name}: first {first:.0f} ms, p50 {rows[-1][2]:.0f} ms, p95 {p95:.0f} ms", file=sys.stderr,
                  flush=True)
    return rows


def print_table(rows: list[tuple[str, float, float, float, float, int]]) -> None:
    print("| page | first ms | p50 ms | p95 ms | max ms | size |\n|---|---:|---:|---:|---:|---:|")
    for name, first, p50, p95, most, size in rows:
        print(f"| {name} | {first:.0f} | {p50:.0f} | {p95:.0f} | {most:.0f} | {size / 1024:.0f} KiB |")


def store_pages(engine: sa.Engine, *, series: int, seed: int) -> dict[str, str]:
    """The pages to time on an existing store, picked from what it holds."""
    rng = random.Random(seed)
    pages = {"dashboard": "/"}
    with session_scope(engine) as s:
        family = s.scalar(sa.select(Case.family).order_by(Case.id).limit(1))
        if family:
            pages["dashboard, filtered"] = f"/?family={family}"
        group = s.execute(sa.select(Case.family, DeviceClassRow.name).join(Series, Series.case_id == Case.id)
                          .join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id)
                          .order_by(Series.id).limit(1)).first()
        if group:
            pages["dashboard, one group"] = f"/?family={group[0]}&device_class={group[1]}"
        pages["dashboard, text filter"] = "/?q=" + (family or "a")[:3]
        ids = list(s.scalars(sa.select(Series.id).where(Series.metric == LATENCY).order_by(Series.id)))
        picked = rng.sample(ids, min(series, len(ids)))
        stepped = list(s.scalars(sa.select(ChangePoint.series_id).distinct().order_by(ChangePoint.series_id)))
        for i, series_id in enumerate(picked):
            pages[f"series (random {i + 1}, id {series_id})"] = f"/series/{series_id}"
        if stepped:
            series_id = rng.choice(stepped)
            pages[f"series (with a change point, id {series_id})"] = f"/series/{series_id}"
        if picked:
            sha = s.scalar(sa.select(Commit.sha).join(Measurement, Measurement.commit_id == Commit.id)
                           .where(Measurement.series_id == picked[0]).order_by(Commit.committed_at.desc()).limit(1))
            pages["samples of a commit (JSON)"] = f"/series/{picked[0]}/samples?sha={sha}"
        classes = list(s.scalars(sa.select(DeviceClassRow.name).order_by(DeviceClassRow.name)))
        repo = s.execute(sa.select(Repository.id, Repository.name, Repository.default_branch)
                         .order_by(Repository.id).limit(1)).first()
        if repo:
            head = s.execute(sa.select(Commit.id, Commit.sha).where(Commit.repository_id == repo.id,
                                                                    Commit.branch == repo.default_branch)
                             .order_by(Commit.committed_at.desc(), Commit.id.desc()).limit(1)).first()
            base = s.scalar(sa.select(CommitParent.parent_sha).where(CommitParent.commit_id == head.id)
                            .order_by(CommitParent.position).limit(1)) if head else None
            run_id = s.scalar(sa.select(Run.id).where(Run.commit_id == head.id).order_by(Run.created_at.desc())
                              .limit(1)) if head else None
            if run_id:
                pages["run of the newest commit"] = f"/runs/{run_id}"
            if head and base:
                compare = f"/compare?repository={repo.name}&head={head.sha}&base={base}"
                pages["compare (head vs parent, all device classes)"] = compare
                pages["compare (all device classes), similar, page 3, largest slowdown first"] = \
                    f"{compare}&status=similar&order=slowdown&page=3"
                if classes:
                    pages[f"compare (head vs parent, {classes[0]})"] = f"{compare}&device_class={classes[0]}"
    pages["regressions"] = "/regressions"
    for name in classes:
        pages[f"roofline {name}"] = f"/roofline?device_class={name}"
    if classes:
        pages[f"roofline {classes[0]}, furthest below the roof first, page 2"] = \
            f"/roofline?device_class={classes[0]}&order=share&page=2"
    pages["devices"] = "/devices"
    pages["jobs"] = "/jobs"
    return pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--scale", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--database-url", default="")
    parser.add_argument("--on-store", default="", metavar="URL",
                        help="time the pages on this existing store (nothing is built or written)")
    parser.add_argument("--series", type=int, default=3, help="--on-store: random series pages to time")
    parser.add_argument("--seed", type=int, default=20261122, help="--on-store: picks the series")
    args = parser.parse_args()

    if args.on_store:
        home = Path(tempfile.mkdtemp(prefix="ui-latency-"))
        engine = make_engine(args.on_store)
        with session_scope(engine) as s:
            sizes = {name: s.scalar(sa.select(sa.func.count()).select_from(model)) for name, model in
                     (("series", Series), ("measurements", Measurement), ("change points", ChangePoint))}
        print(f"store: {engine.dialect.name} {engine.url.render_as_string(hide_password=True)}; "
              + ", ".join(f"{v} {k}" for k, v in sizes.items()), file=sys.stderr)
        pages = store_pages(engine, series=args.series, seed=args.seed)
        app = create_app(Settings(home=home, database_url=args.on_store, log_level="WARNING"), engine)
        print_table(time_pages(app, pages, args.repeat))
        engine.dispose()
        return

    home = Path(tempfile.mkdtemp(prefix="ui-latency-"))
    engine = open_store(args.database_url or f"sqlite:///{home}/benchfarm.db")
    started = time.perf_counter()
    demo = demo_store.build(engine, commits=args.commits, scale=args.scale, evil=False)
    farm = demo_store.add_farm(engine, demo)
    built = time.perf_counter() - started
    with session_scope(engine) as s:
        sizes = {name: s.scalar(sa.select(sa.func.count()).select_from(model)) for name, model in
                 (("cases", Case), ("series", Series), ("measurements", Measurement), ("change points", ChangePoint))}
        sizes["samples"] = s.scalar(sa.select(sa.func.sum(Measurement.n)))
        # the case's latency series (a suite case on a GPU class also has series of hardware counters)
        series_id = s.scalar(sa.select(Series.id).join(Case).where(Case.case_id == demo.cases[0],
                                                                   Series.metric == LATENCY).order_by(Series.id))
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
    print_table(time_pages(app, pages, args.repeat))
    engine.dispose()


if __name__ == "__main__":
    main()
