"""Long pages a page at a time: the dashboard's groups cut to their first tiles (regressed first),
the compare page's tables filtered, ordered and paged, the roofline's table and a run's tables
paged, the roofline's newest medians; over real HTTP on both stores."""

from __future__ import annotations

import re

import pytest
import requests
import sqlalchemy as sa

from pipeline.results.store import roofline
from pipeline.results.store.db import session_scope
from pipeline.results.store.models import Case, Commit, DeviceClassRow, Measurement, Run, Series
from pipeline.service.web.paging import paginate

from . import demo_store
from .conftest import Service, roofline_data

SECTION = re.compile(r'<section class="group" data-family="([^"]+)" data-device-class="([^"]+)">(.*?)</section>', re.S)


def _groups(html: str) -> dict[tuple[str, str], tuple[list[str], str]]:
    """(family, device class) -> (the states of its tiles in page order, the section's HTML)."""
    return {(fam, dc): (re.findall(r'class="tile ([a-z-]+)"', body), body) for fam, dc, body in SECTION.findall(html)}


def _tables(html: str) -> list[list[tuple[str, str, str]]]:
    """Each verdict table's rows as (case id, change data-value, status)."""
    out = []
    for body in re.findall(r'<table class="sortable verdict-table"[^>]*>(.*?)</table>', html, re.S):
        rows = []
        for row in re.findall(r'<tr class="row-[^"]+">(.*?)</tr>', body, re.S):
            cell = re.search(r'<td class="mono case-col">(.*?)</td>', row, re.S).group(1)  # type: ignore[union-attr]
            case_id = re.sub(r"<[^>]+>", "", cell).split(" (control)")[0]   # line-break hints (<wbr>) and the link out
            values = re.findall(r'data-value="([^"]*)"', row)  # base, head, change, p
            status = re.search(r'<td class="status-[^"]+">([a-z ]+)', row).group(1)  # type: ignore[union-attr]
            rows.append((case_id, values[2], status.strip()))
        out.append(rows)
    return out


def test_paginate_clamps_and_counts() -> None:
    page = paginate(list(range(10)), 2, 4)
    assert (page.items, page.number, page.pages, page.first, page.last, page.total) == ([4, 5, 6, 7], 2, 3, 5, 8, 10)
    assert paginate(list(range(10)), 9, 4).items == [8, 9] and paginate(list(range(10)), 0, 4).number == 1
    empty = paginate([], 3, 4)
    assert (empty.items, empty.number, empty.pages, empty.first, empty.last) == ([], 1, 1, 0, 0)
    with pytest.raises(ValueError, match="positive"):
        paginate([1], 1, 0)


def test_dashboard_groups_show_their_first_tiles_regressed_first(paged_service: Service) -> None:
    full = _groups(requests.get(paged_service.url + "/", params={"family": "gemm",
                                                                 "device_class": "nvidia-h100-sxm"}, timeout=30).text)
    (states, body), = full.values()
    assert len(states) == 5  # group_tiles: the group's own view lists 5 of its 10 series
    assert "5 of 10 shown" in body
    html = requests.get(paged_service.url + "/", timeout=30).text
    groups = _groups(html)
    assert len(groups) == 6 and all(len(states) <= 3 for states, _ in groups.values())
    gemm, body = groups[("gemm", "nvidia-h100-sxm")]
    counts = {state: int(n) for n, state in re.findall(r'<span class="state-[a-z-]+">(\d+) ([a-z ]+)</span>', body)}
    assert counts["regressed"] + counts["improved"] >= 3
    assert gemm == (["regressed"] * counts["regressed"] + ["improved"] * counts["improved"])[:3]  # attention first
    assert "3 of 10 shown" in body and "device_class=nvidia-h100-sxm" in body and "family=gemm" in body
    order = {"regressed": 0, "improved": 1, "stable": 2, "no-data": 3}
    assert all(states == sorted(states, key=order.__getitem__) for states, _ in groups.values())
    # the counts still cover every series, not the tiles shown
    assert re.search(r"<b>31</b>series shown", html)


def test_dashboard_filters_run_in_the_query(paged_service: Service) -> None:
    def get(**params: str) -> str:
        return requests.get(paged_service.url + "/", params=params, timeout=30).text

    improved = _groups(get(state="improved"))
    assert improved and all(set(states) == {"improved"} for states, _ in improved.values())
    assert re.search(r"<b>8</b>regressed", get(state="improved"))  # counts of the other states stay
    vendor = get(impl="vendor", dtype="bf16")
    assert re.search(r"<b>6</b>series shown", vendor)
    assert all(fam == "gemm" for fam, _ in _groups(vendor))
    with session_scope(paged_service.engine) as s:
        expected = sum("8192x1024" in str(case_id) for case_id in s.scalars(
            sa.select(Case.case_id).join(Series, Series.case_id == Case.id).where(Series.metric == "latency")))
    assert expected == 6  # triton, iree and vendor on two device classes (the counters' series are not shown)
    assert re.search(rf"<b>{expected}</b>series shown", get(q="8192X1024"))  # a part of the case id, any case
    assert "No series match these filters" in get(q="no-such-case")


def test_compare_page_filters_orders_and_pages(paged_service: Service) -> None:
    url = paged_service.url + "/compare"
    base = {"repository": demo_store.REPO, "pr": "7"}
    first = requests.get(url, params=base, timeout=30).text
    tables = _tables(first)
    assert len(tables) == 2 and all(len(t) == 4 for t in tables)
    assert 'id="pager"' in first and "page 1 of" in first
    assert tables[0][0][2] == "regressed" and tables[0][0][0].startswith("gemm/")  # verdict order: the PR's first
    pages = int(re.search(r"page 1 of (\d+)", first).group(1))  # type: ignore[union-attr]
    seen = [r for page in range(1, pages + 1)
            for r in _tables(requests.get(url, params={**base, "page": str(page)}, timeout=30).text)[0]]
    assert len(seen) == len({r[0] for r in seen})  # every row once across the pages
    assert 'rel="next"' not in requests.get(url, params={**base, "page": str(pages)}, timeout=30).text

    similar = _tables(requests.get(url, params={**base, "status": "similar"}, timeout=30).text)
    assert similar[0] and all(r[2] == "similar" for t in similar for r in t)
    slowest = _tables(requests.get(url, params={**base, "order": "slowdown"}, timeout=30).text)[0]
    changes = [float(r[1]) for r in slowest if r[1]]
    assert changes == sorted(changes, reverse=True) and changes[0] > 0.05
    only = _tables(requests.get(url, params={**base, "q": "conv/", "page": "1"}, timeout=30).text)
    assert only[0] and all(r[0].startswith("conv/") for t in only for r in t)
    assert 'id="rows-form"' in first and 'value="7"' in first  # the filter form keeps the pull request


def test_roofline_table_pages_and_orders_by_share(paged_service: Service) -> None:
    url = paged_service.url + "/roofline"
    page = requests.get(url, params={"device_class": "nvidia-h100-sxm"}, timeout=30).text
    assert len(roofline_data(page)["cases"]) == 15  # the chart keeps every case
    table = page.split('id="roofline-table"')[1].split("</table>")[0]
    assert table.count("<tr><td") == 4 and "cases 1–4 of 15" in page and 'rel="next"' in page
    shares = []
    for n in range(1, 5):
        ordered = requests.get(url, params={"device_class": "nvidia-h100-sxm", "order": "share", "page": str(n)},
                               timeout=30).text.split('id="roofline-table"')[1]
        shares += [int(v) for v in re.findall(r'<td class="num">(\d+)%</td></tr>', ordered)]
    assert len(shares) == 15 and shares == sorted(shares) and shares[-1] == 100


def test_run_page_shows_the_first_rows_and_links_the_rest(paged_service: Service) -> None:
    with session_scope(paged_service.engine) as s:
        run_id = s.scalar(sa.select(Run.id).join(Commit, Run.commit_id == Commit.id)
                          .where(Commit.sha == demo_store.main_sha(23)))
    page = requests.get(f"{paged_service.url}/runs/{run_id}", timeout=30).text
    notes = re.findall(r"(\d+) of (\d+) rows shown, changes first", page)
    assert [int(total) for _, total in notes] == [len(paged_service.demo.cases)] * 2  # a row per case, per class
    assert all(shown == "4" for shown, _ in notes) and page.count("all of them on the compare page") == 2


def test_latest_medians_walk_back_to_each_series_newest_commit(paged_service: Service) -> None:
    with session_scope(paged_service.engine) as s:
        dc = s.scalar(sa.select(DeviceClassRow.id).where(DeviceClassRow.name == "cpu-x86-64"))
        series = list(s.scalars(sa.select(Series.id).where(Series.device_class_id == dc).order_by(Series.id)))
        newest = s.scalars(sa.select(Commit.id).order_by(Commit.committed_at.desc())).all()
        # the newest two commits lose some series, the third newest loses one more: the walk must go back
        for commit_id, dropped in ((newest[0], series[:5]), (newest[1], series[:3]), (newest[2], series[:1])):
            s.execute(sa.delete(Measurement).where(Measurement.commit_id == commit_id,
                                                   Measurement.series_id.in_(dropped)))
    with session_scope(paged_service.engine) as s:
        got = {sid: median for sid, _, _, median in roofline.latest_medians(s, device_class_id=dc, metric="latency")}
        expected = {}
        for sid in series:  # the plain definition, one series at a time
            row = s.execute(sa.select(Measurement.median).join(Commit, Measurement.commit_id == Commit.id)
                            .where(Measurement.series_id == sid)
                            .order_by(Commit.committed_at.desc(), Commit.id.desc(), Measurement.id.desc())
                            .limit(1)).first()
            if row is not None:
                expected[sid] = row[0]
    assert got == expected and len(got) == len(series)
