"""The web UI over real HTTP on both stores: pages, filters, escaping, sign-in, CSRF, triage, privacy."""

from __future__ import annotations

import re

import requests
import sqlalchemy as sa

from pipeline.results.store.db import session_scope
from pipeline.results.store.models import Case, ChangePoint, Commit, Run, Series, TriageEvent

from . import demo_store
from .conftest import BOOTSTRAP, Service, roofline_data


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field in the page"
    return found.group(1)


def _counts(html: str) -> dict[str, int]:
    return {state.strip(): int(n) for n, state in re.findall(r'class="count[^"]*"[^>]*><b>(\d+)</b>([^<]+)<', html)}


def _sign_in(service: Service, browser: requests.Session, **form: str) -> requests.Response:
    page = browser.get(f"{service.url}/login", timeout=30)
    return browser.post(f"{service.url}/login", data={"csrf": _csrf(page.text), "next": "/regressions", **form},
                        timeout=30, allow_redirects=False)


def test_dashboard_counts_filters_and_runs(service: Service) -> None:
    page = requests.get(service.url + "/", timeout=30)
    assert page.status_code == 200
    counts = _counts(page.text)
    assert counts == {"regressed": 8, "suspected": 0, "improved": 4, "stable": 18, "no data": 1, "series shown": 31}
    assert page.text.count('class="tile ') == 31 and "Newest runs" in page.text
    gemm = _counts(requests.get(service.url + "/", params={"family": "gemm", "impl": "vendor"}, timeout=30).text)
    assert gemm["series shown"] == 6 and gemm["stable"] == 6  # the controls stay flat
    text = requests.get(service.url + "/", params={"q": "8192x1024", "device_class": "cpu-x86-64"}, timeout=30).text
    assert _counts(text)["series shown"] == 3 and "8192x1024x4096" in text
    only = requests.get(service.url + "/", params={"state": "regressed"}, timeout=30).text
    assert only.count('class="tile regressed"') == 8 and 'class="tile stable"' not in only


def _run_row(html: str, run_id: str) -> str:
    """The dashboard's newest-runs row of one run ('' when it is not listed)."""
    found = re.search(rf'<tr data-run="{run_id}">.*?</tr>', html, re.S)
    return found.group(0) if found else ""


def test_the_newest_runs_show_their_verdicts_and_the_pages_say_what_they_list(service: Service) -> None:
    """Issue 34: after a run that printed `regressed`, the dashboard's tiles (the history's change
    points) showed nothing of it: the newest runs carry their own verdict, and both pages say what
    they show."""
    with session_scope(service.engine) as s:
        pr_run = s.scalar(sa.select(Run.id).where(Run.kind == "pr"))
        newest_push = s.scalar(sa.select(Run.id).where(Run.kind == "push").order_by(Run.created_at.desc()).limit(1))
    dashboard = requests.get(service.url + "/", timeout=30).text
    row = _run_row(dashboard, pr_run)
    assert 'class="run-verdict status-regressed"' in row and "<b>regressed</b>" in row, row
    assert "2 regressed, 22 similar; 6 controls" in row, row   # the slowed GEMM on each device class
    assert "<b>" in _run_row(dashboard, newest_push), dashboard   # a push run has its verdict too
    assert "verdict compares its own results with their base" in dashboard and 'id="what-tiles-show"' in dashboard
    regressions = requests.get(service.url + "/regressions", timeout=30).text
    said = re.search(r'<p class="small muted" id="what-regressions-are">(.*?)</p>', regressions, re.S)
    assert said and "Change points of each series' history" in said.group(1) and "not one" in said.group(1)
    listed = re.search(r'<p id="regressed-runs">(.*?)</p>', regressions, re.S)
    assert listed and f'href="/runs/{pr_run}"' in listed.group(1), regressions

    # the run's own page and the compare page say what its change is, beside the medians
    run_page = requests.get(f"{service.url}/runs/{pr_run}", timeout=30).text
    note = re.search(r'<p class="small muted change-note">(.*?)</p>', run_page, re.S)
    assert note and "even in sign" in note.group(1), run_page
    assert f'<th class="num" title="{note.group(1)}">change [95% CI]</th>' in run_page
    compared = requests.get(f"{service.url}/compare", params={"repository": demo_store.REPO, "pr": "7"}, timeout=30).text
    assert compared.count('class="small muted change-note"') == 2   # one under each device class's table


def test_html_in_case_ids_and_commit_messages_is_shown_as_text(service: Service) -> None:
    dashboard = requests.get(service.url + "/", timeout=30).text
    assert '<img src=x onerror="window.__xss=3">' not in dashboard
    assert "&lt;img src=x onerror=&#34;window.__xss=3&#34;&gt;" in dashboard
    with session_scope(service.engine) as s:
        series_id = s.scalar(sa.select(ChangePoint.series_id).limit(1))
    series = requests.get(f"{service.url}/series/{series_id}", timeout=30).text
    assert "<script>window.__xss" not in series and "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in series
    embedded = re.search(r'<script type="application/json" id="series-data">(.*?)</script>', series, re.S)
    assert embedded and "<" not in embedded.group(1) and "\\u003cscript\\u003e" in embedded.group(1)


def test_series_page_graph_data_change_points_and_samples(service: Service) -> None:
    with session_scope(service.engine) as s:
        cp = s.execute(sa.select(ChangePoint.series_id, ChangePoint.direction).join(Series).join(Case)
                       .where(Case.case_id == service.demo.cases[0]).limit(1)).one()
    page = requests.get(f"{service.url}/series/{cp.series_id}", timeout=30).text
    data = re.search(r'id="series-data">(.*?)</script>', page, re.S)
    assert data
    import json

    chart = json.loads(data.group(1))
    # the main branch's commits: the pull request's head is compared, it is not history
    assert len(chart["median"]) == service.demo.commits == 24 and chart["change_points"] and chart["control"] is not None
    assert chart["sha"] == [demo_store.main_sha(i) for i in range(24)] and set(chart["runs"]) == {1}
    assert f"{demo_store.REPO_URL}/commit/{demo_store.main_sha(23)}" in page
    samples = requests.get(f"{service.url}/series/{cp.series_id}/samples", params={"sha": chart["sha"][3]}, timeout=30)
    assert samples.status_code == 200 and len(samples.json()["samples"]) == 12
    assert requests.get(f"{service.url}/series/{cp.series_id}/samples", params={"sha": "f" * 40},
                        timeout=30).status_code == 404
    assert requests.get(f"{service.url}/series/999999", timeout=30).status_code == 404
    assert requests.get(f"{service.url}/static/vendor/uplot/uPlot.iife.min.js", timeout=30).status_code == 200


def test_every_page_names_its_icon_and_the_icon_is_served(service: Service) -> None:
    """Issue 34: a 404 for /favicon.ico on every page."""
    for path in ("/", "/regressions", "/roofline", "/compare"):
        assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in \
            requests.get(service.url + path, timeout=30).text, path
    for path in ("/static/favicon.svg", "/favicon.ico"):
        icon = requests.get(service.url + path, timeout=30)
        assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml"), path
        assert icon.text.startswith("<svg"), path


def test_compare_page_pull_request_and_two_commits(service: Service) -> None:
    pr = requests.get(f"{service.url}/compare", params={"repository": demo_store.REPO, "pr": "7"}, timeout=30).text
    assert 'id="verdict">regressed<' in pr and pr.count('class="sortable verdict-table"') == 2
    assert "significant" in pr and demo_store.main_sha(23)[:10] in pr  # the base: the PR's parent
    two = requests.get(f"{service.url}/compare", timeout=30, params={
        "repository": demo_store.REPO, "head": demo_store.main_sha(23)[:8], "base": demo_store.main_sha(2)[:8],
        "device_class": "cpu-x86-64"}).text
    assert two.count('class="sortable verdict-table"') == 1 and "explicit" in two
    assert 'class="status-regressed"' in two and 'class="status-improved"' in two
    missing = requests.get(f"{service.url}/compare", params={"repository": demo_store.REPO, "head": "abcdef12"},
                           timeout=30)
    assert missing.status_code == 404 and "no recorded commit" in missing.text


def test_roofline_places_each_case_and_names_those_left_off(service: Service) -> None:
    page = requests.get(f"{service.url}/roofline", params={"device_class": "nvidia-h100-sxm"}, timeout=30).text
    chart = roofline_data(page)
    assert len(chart["cases"]) == len(service.demo.cases) == 15 and "best measured case" in page
    assert {c["case_id"] for c in chart["cases"]} == set(service.demo.cases)
    assert all(chart["x_range"][0] < c["x"] < chart["x_range"][1] and chart["y_range"][0] < c["y"] < chart["y_range"][1]
               for c in chart["cases"])
    assert chart["roof"]["y"][1] == chart["ceilings"]["flops"] and chart["y_ticks"][-1][1].endswith("FLOP/s")
    assert ">15 of 15 cases on the chart<" in page and 'id="roofline-left-off"' not in page
    # a newer bundle counts no FLOPs for one case (a gather moves data only): left off, and named
    from pipeline.contracts import BundleEntry
    from pipeline.results.store import ingest
    from tests.helpers import factories as f

    moved = service.demo.cases[1]
    entry = BundleEntry.model_validate({**f.built_entry(moved).model_dump(), "flops": 0, "bytes": 4096})
    with session_scope(service.engine) as s:
        ingest.ingest_manifest(s, manifest=f.manifest(demo_store.main_sha(1), [entry], repository=demo_store.REPO),
                               path="/bundles/no-flops")
    page = requests.get(f"{service.url}/roofline", params={"device_class": "nvidia-h100-sxm"}, timeout=30).text
    assert len(roofline_data(page)["cases"]) == 14 and "14 of 15 cases on the chart; left off:" in page
    left_off = page.split('id="roofline-left-off"')[1].split("</ul>")[0]
    assert moved in left_off and "no FLOPs counted (moves data only)" in left_off, left_off


def _section(html: str, cp_id: int) -> str:
    """The regressions page's section of one change point ('' when it is not listed)."""
    found = re.search(rf'<section class="regression[^"]*" id="cp-{cp_id}".*?</section>', html, re.S)
    return found.group(0) if found else ""


def _series_row(html: str, cp_id: int) -> str:
    """The series page's change-point table row of one change point ('' when it is not listed)."""
    found = re.search(rf'<tr class="lifecycle-[a-z]+" id="cp-{cp_id}">.*?</tr>', html, re.S)
    return found.group(0) if found else ""


def test_change_point_lifecycle_on_the_dashboard_series_and_regressions_pages(service: Service) -> None:
    """Issue 13: a slow newest commit shows at once as suspected (dashboard tile, regressions page,
    series page); refuted by the next commit it is retracted, not deleted: listed under its lifecycle
    with the reason and its triage history kept; a slowdown that stays is suspected, then confirmed."""
    from pipeline.results.store import triage

    demo = service.demo
    before = _counts(requests.get(service.url + "/", timeout=30).text)
    assert before["suspected"] == 0

    def point(sha: str) -> tuple[int, int, str, str]:
        with session_scope(service.engine) as s:
            row = s.execute(sa.select(ChangePoint.id, ChangePoint.series_id, ChangePoint.lifecycle, ChangePoint.state)
                            .join(Commit, ChangePoint.after_commit_id == Commit.id).join(Series).join(Case)
                            .where(Commit.sha == sha, Case.case_id == demo_store.CONTROL)).one()
        return row.id, row.series_id, row.lifecycle, row.state

    (slow,) = demo_store.extend_history(service.engine, demo, [1.5])   # one slow run of a flat series
    cp_id, series_id, lifecycle, _ = point(slow)
    assert lifecycle == "suspected"
    dashboard = requests.get(service.url + "/", timeout=30).text
    assert _counts(dashboard)["suspected"] == 1 and _counts(dashboard)["regressed"] == before["regressed"]
    assert f'class="tile suspected" href="/series/{series_id}"' in dashboard
    section = _section(requests.get(f"{service.url}/regressions", timeout=30).text, cp_id)
    assert 'data-lifecycle="suspected"' in section and "+50" in section and "Suspected: the newest commits" in section
    row = _series_row(requests.get(f"{service.url}/series/{series_id}", timeout=30).text, cp_id)
    assert '<span class="lifecycle suspected">suspected</span>' in row
    with session_scope(service.engine) as s:   # someone triages it while it is suspected
        triage.triage(s, change_point_id=cp_id, state="assigned", who="ada", assignee="bob", note="looking")

    demo_store.extend_history(service.engine, demo, [1.0])   # the next commit is back at the level
    assert point(slow)[2:] == ("retracted", "assigned")   # recorded, not deleted; the triage state kept
    dashboard = requests.get(service.url + "/", timeout=30).text
    assert _counts(dashboard)["suspected"] == 0 and f'class="tile suspected" href="/series/{series_id}"' not in dashboard
    assert not _section(requests.get(f"{service.url}/regressions", timeout=30).text, cp_id)   # not open
    retracted = requests.get(f"{service.url}/regressions", params={"lifecycle": "retracted"}, timeout=30).text
    section = _section(retracted, cp_id)
    assert 'data-lifecycle="retracted"' in section and '<span class="lifecycle retracted">retracted</span>' in section
    reason = re.search(r'<p class="small reason">Retracted [0-9-]+ [0-9:]+: (.*?)</p>', section, re.S)
    assert reason and "is an outlier" in reason.group(1) and "+50" in reason.group(1), section
    history = re.findall(r"<li>(.*?)</li>", section, re.S)   # the analysis' and ada's events, oldest first
    assert len(history) == 3, history
    assert "benchfarm analysis" in history[0] and "suspected: regression of +50" in history[0]
    assert "ada" in history[1] and "<b>assigned</b>" in history[1] and "assigned to bob" in history[1]
    assert "benchfarm analysis" in history[2] and "retracted: its commit" in history[2]
    assert "Bisect" not in section   # nothing to bisect in a retracted point
    row = _series_row(requests.get(f"{service.url}/series/{series_id}", timeout=30).text, cp_id)
    assert '<span class="lifecycle retracted">retracted</span>' in row and 'class="small muted reason">its commit' in row

    stays = demo_store.extend_history(service.engine, demo, [1.3, 1.3])   # a slowdown that stays: suspected ...
    new_id, _, lifecycle, _ = point(stays[0])
    assert lifecycle == "suspected" and _counts(requests.get(service.url + "/", timeout=30).text)["suspected"] == 1
    demo_store.extend_history(service.engine, demo, [1.3] * 5)   # ... still suspected on its seventh commit
    assert point(stays[0])[2] == "suspected"
    demo_store.extend_history(service.engine, demo, [1.3])   # ... confirmed on its eighth (issue 31's rule)
    assert point(stays[0])[2] == "confirmed"
    dashboard = _counts(requests.get(service.url + "/", timeout=30).text)
    assert dashboard["suspected"] == 0 and dashboard["regressed"] == before["regressed"] + 1
    section = _section(requests.get(f"{service.url}/regressions", timeout=30).text, new_id)
    assert 'data-lifecycle="confirmed"' in section and "+30" in section and "Suspected:" not in section
    assert '<span class="lifecycle confirmed">confirmed</span>' in _series_row(
        requests.get(f"{service.url}/series/{series_id}", timeout=30).text, new_id)


def test_triage_needs_a_signed_in_user_and_the_csrf_token(service: Service) -> None:
    with session_scope(service.engine) as s:
        cp_id = s.scalar(sa.select(ChangePoint.id).where(ChangePoint.direction == "regression").limit(1))
    anonymous = requests.Session()
    form = {"state": "noisy", "next": "/regressions"}
    page = anonymous.get(f"{service.url}/regressions", timeout=30).text
    assert 'action="/change-points/' not in page and "to triage" in page
    anonymous_csrf = _csrf(anonymous.get(f"{service.url}/login", timeout=30).text)
    refused = anonymous.post(f"{service.url}/change-points/{cp_id}/triage", data={**form, "csrf": anonymous_csrf},
                             timeout=30, allow_redirects=False)
    assert refused.status_code == 303 and refused.headers["location"].startswith("/login?next=")

    created = requests.post(f"{service.url}/api/v1/users", json={"name": "ada", "password": "correct horse"},
                            headers={"authorization": f"Bearer {BOOTSTRAP}"}, timeout=30)
    assert created.status_code == 201, created.text
    browser = requests.Session()
    assert _sign_in(service, browser, name="ada", password="wrong password").status_code == 401
    assert _sign_in(service, browser, token=service.tokens["agent"]).status_code == 401  # agents cannot sign in
    signed = _sign_in(service, browser, name="ada", password="correct horse")
    assert signed.status_code == 303 and signed.headers["location"] == "/regressions"

    no_csrf = browser.post(f"{service.url}/change-points/{cp_id}/triage", data=form, timeout=30, allow_redirects=False)
    assert no_csrf.status_code == 403
    stale = browser.post(f"{service.url}/change-points/{cp_id}/triage", data={**form, "csrf": anonymous_csrf},
                         timeout=30, allow_redirects=False)
    assert stale.status_code == 403  # the anonymous session's token is not this one's
    page = browser.get(f"{service.url}/regressions", timeout=30).text
    assert "ada" in page and f'action="/change-points/{cp_id}/triage"' in page
    no_link = browser.post(f"{service.url}/change-points/{cp_id}/triage", timeout=30,
                           data={"state": "confirmed", "next": "/regressions", "csrf": _csrf(page)})
    assert "bug_link" in no_link.text  # refused, said on the page it returns to
    done = browser.post(f"{service.url}/change-points/{cp_id}/triage", timeout=30, data={
        "state": "confirmed", "bug_link": "https://bugs.example/7", "next": "/regressions", "csrf": _csrf(page)})
    assert done.status_code == 200 and f"change point {cp_id} is now confirmed" in done.text
    with session_scope(service.engine) as s:
        event = s.scalars(sa.select(TriageEvent).where(TriageEvent.change_point_id == cp_id)
                          .order_by(TriageEvent.id.desc()).limit(1)).one()
    assert (event.who, event.state, event.bug_link) == ("ada", "confirmed", "https://bugs.example/7")

    disabled = requests.delete(f"{service.url}/api/v1/users/ada", headers={"authorization": f"Bearer {BOOTSTRAP}"},
                               timeout=30)
    assert disabled.status_code == 200
    assert "to triage" in browser.get(f"{service.url}/regressions", timeout=30).text  # signed out at once


def test_token_sign_in_and_tampered_cookies(service: Service) -> None:
    browser = requests.Session()
    assert _sign_in(service, browser, token=service.tokens["user"]).status_code == 303
    assert "user-token" in browser.get(f"{service.url}/", timeout=30).text
    cookie = browser.cookies.get("benchfarm_session")
    assert cookie and service.tokens["user"] not in cookie
    payload, stamp, signature = cookie.split(".")
    forged = requests.Session()
    # one character of the signature changed, in the middle: its last ones carry padding bits, and "AA" in
    # place of the last two was, once in a thousand runs, the signature itself
    wrong = "B" if signature[10] == "A" else "A"
    forged.cookies.set("benchfarm_session", f"{payload}.{stamp}.{signature[:10]}{wrong}{signature[11:]}")
    assert "user-token" not in forged.get(f"{service.url}/", timeout=30).text
    requests.delete(f"{service.url}/api/v1/tokens/user-token", headers={"authorization": f"Bearer {BOOTSTRAP}"},
                    timeout=30)
    assert "user-token" not in browser.get(f"{service.url}/", timeout=30).text  # revoked: signed out


def test_private_service_needs_sign_in_for_pages_and_reads(private_service: Service) -> None:
    url = private_service.url
    page = requests.get(f"{url}/series/1", timeout=30, allow_redirects=False)
    assert page.status_code == 303 and page.headers["location"].startswith("/login?next=/series/1")
    assert requests.get(f"{url}/api/v1/dashboard", timeout=30).status_code == 401
    assert requests.get(f"{url}/api/v1/health", timeout=30).status_code == 200
    agent = {"authorization": f"Bearer {private_service.tokens['agent']}"}
    assert requests.get(f"{url}/api/v1/dashboard", headers=agent, timeout=30).status_code == 401
    user = {"authorization": f"Bearer {private_service.tokens['user']}"}
    assert requests.get(f"{url}/api/v1/dashboard", headers=user, timeout=30).status_code == 200
    browser = requests.Session()
    assert _sign_in(private_service, browser, token=private_service.tokens["user"]).status_code == 303
    assert browser.get(f"{url}/", timeout=30).status_code == 200
    assert browser.get(f"{url}/api/v1/dashboard", timeout=30).status_code == 200


def test_sign_in_page_says_how_to_make_the_first_user(service: Service) -> None:
    page = requests.get(f"{service.url}/login", timeout=30).text
    assert "benchfarm user create --name NAME" in page


def test_page_errors_are_pages_with_the_navigation(service: Service) -> None:
    from pipeline.results.store.models import Job, Run

    def html_error(path: str, status: int, *said: str) -> None:
        got = requests.get(service.url + path, timeout=30)
        assert got.status_code == status, (path, got.status_code, got.text[:300])
        assert got.headers["content-type"].startswith("text/html"), (path, got.headers["content-type"])
        assert 'href="/jobs"' in got.text and 'href="/compare"' in got.text, path   # the navigation
        for text in said:
            assert text in got.text, (path, text, got.text[-800:])

    html_error("/series/99999", 404, "no series 99999")
    html_error("/runs/nope", 404, "run &#39;nope&#39; does not exist")
    html_error("/compare?page=abc", 422, "<code>page</code>", "valid integer")
    html_error("/jobs?page=abc", 422, "<code>page</code>")
    html_error("/jobs?page=0", 422, "<code>page</code>")
    html_error("/no/such/page", 404, "Not Found")
    api = requests.get(service.url + "/api/v1/runs/nope", timeout=30)
    assert api.status_code == 404 and api.json()["error"]   # the API keeps answering JSON

    with session_scope(service.engine) as s:
        run_id = s.scalar(sa.select(Run.id).limit(1))
        job_id = s.scalar(sa.select(Job.id).limit(1))
    for path, full in ((f"/runs/{run_id[:12]}", f"/runs/{run_id}"), (f"/jobs/{job_id[:12]}", f"/jobs/{job_id}")):
        got = requests.get(service.url + path, timeout=30)   # a short id as the pages show it, typed
        assert got.status_code == 200 and got.url.endswith(full), (path, got.status_code, got.url)
    by_run = requests.get(service.url + "/jobs", params={"run": run_id[:8]}, timeout=30)
    assert by_run.status_code == 200 and run_id in by_run.text
    assert requests.get(service.url + "/jobs", params={"page": 2}, timeout=30).status_code == 200


def test_a_sign_in_waiting_on_the_store_leaves_the_service_answering(service: Service) -> None:
    """CI once: a token sign-in ran its write on the event loop and waited there on SQLite's lock, held by a
    request whose commit needed the loop: the service stopped answering for the 30 s of the busy timeout and
    the sign-in failed with "database is locked". Here the token's row is held by another transaction while a
    sign-in waits on it: the service keeps answering, and the sign-in completes once the row is free."""
    import threading
    import time

    from pipeline.results.store.models import ApiToken

    browser = requests.Session()
    csrf = _csrf(browser.get(f"{service.url}/login", timeout=30).text)
    answers: list[requests.Response] = []
    with service.engine.connect() as holder, holder.begin() as held:
        holder.execute(sa.update(ApiToken).where(ApiToken.name == "user-token").values(last_used_at=None))
        signing = threading.Thread(target=lambda: answers.append(browser.post(
            f"{service.url}/login", data={"csrf": csrf, "next": "/", "token": service.tokens["user"]}, timeout=60,
            allow_redirects=False)))
        signing.start()
        time.sleep(1.0)   # for the sign-in to reach its write (if it has not, the check below cannot fail)
        other = requests.get(f"{service.url}/static/favicon.svg", timeout=10)
        assert other.status_code == 200 and signing.is_alive()
        held.commit()
    signing.join(60)
    assert answers and answers[0].status_code == 303, answers and answers[0].text[:500]
