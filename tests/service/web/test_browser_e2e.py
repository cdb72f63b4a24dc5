"""End-to-end in a real headless Chromium (Debian's chromium + chromedriver, driven by Selenium)
against the running service on a demo store: the dashboard and its filters, a series' graph drawn
by uPlot with its samples on hover and its hardware counters beside it, a pull request's comparison sorted, sign-in and triage of a
regression; HTML in a case id or a commit message never runs. Compile statistics of real Triton
builds (cuda:sm_90 and the build-only hip:gfx1250): their list, compare section and history. Then `benchfarm up --no-run` in a
subprocess (service, builder and the in-process agent) on a tiny suite: sign in, trigger an ad-hoc
run from the form, watch its job go from the build to the agent to done, see the results. With
BENCHFARM_SCREENSHOTS=DIR, a screenshot of each page is written there (docs/screenshots in the
repository)."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import sqlalchemy as sa
from sqlalchemy import Engine

from pipeline.config import Settings
from pipeline.service.app import create_app
from pipeline.results.store.db import open_store
from tests.helpers.cli_zygote import benchfarm_argv
from tests.helpers.farm import FAST
from tests.helpers.live_server import free_port, live_server
from tests.helpers.suite_repo import (
    GemmCase,
    case_id,
    commit_all,
    gemm_suite_files,
    make_suite_repo,
    write_files,
)
from tests.helpers.triton_suite import TritonCase, triton_case_id, triton_suite_files

from . import demo_store

pytestmark = pytest.mark.e2e

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
                allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

ADMIN = "e2e-admin-token"


@pytest.fixture(scope="module")
def site_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """The demo site's store (a test that adds to its history writes here)."""
    engine = open_store(f"sqlite:///{tmp_path_factory.mktemp('web-e2e')}/benchfarm.db")
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def site(site_engine: Engine) -> Iterator[tuple[str, demo_store.Demo]]:
    engine = site_engine
    home = Path(str(engine.url.database)).parent
    demo = demo_store.build(engine, commits=40)
    demo_store.add_farm(engine, demo)
    app = create_app(Settings(home=home, api_token=ADMIN, web={"secret_key": "e2e"}), engine)
    with live_server(app) as url:
        created = requests.post(f"{url}/api/v1/users", json={"name": "ada", "password": "correct horse"},
                                headers={"authorization": f"Bearer {ADMIN}"}, timeout=30)
        assert created.status_code == 201, created.text
        yield url, demo


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,1000", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def shot(driver: Any, name: str) -> None:
    folder = os.environ.get("BENCHFARM_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        height = driver.execute_script("return Math.min(document.body.scrollHeight, 2200)")
        driver.set_window_size(1400, max(1000, height + 40))
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))
        driver.set_window_size(1400, 1000)


ROOFLINE_DRAWN = """
    const r = window.benchfarmRoofline, u = r.chart, dpr = devicePixelRatio;
    const plot = [u.bbox.width / dpr, u.bbox.height / dpr], left = u.bbox.left / dpr;
    const ruler = document.createElement('canvas').getContext('2d');
    ruler.font = r.font;
    const axis = u.axes[1], room = left - axis.ticks.size - axis.gap;
    const ticks = JSON.parse(document.getElementById('roofline-data').textContent).y_ticks;
    return {plot, cases: r.cases,
            inside: r.cases.filter(c => c.x >= 0 && c.x <= plot[0] && c.y >= 0 && c.y <= plot[1]).length,
            clipped: ticks.map(t => t[1]).filter(s => ruler.measureText(s).width > room),
            outside: r.labels.filter(l => l.x < left || l.x + l.width > left + plot[0]).map(l => l.text)};"""
"""The roofline as uPlot drew it (static/roofline.js): the plot's size, each case's place in it, the y
axis' tick labels wider than the room left of the plot, and the ceilings' labels outside the plot."""


STEP_CHARTS_DRAWN = """
    return window.benchfarmStepCharts.map(s => {
      const u = s.chart, dpr = devicePixelRatio, left = u.bbox.left / dpr, right = (u.bbox.left + u.bbox.width) / dpr;
      const ruler = document.createElement('canvas').getContext('2d');
      ruler.font = s.font;
      const d = JSON.parse(s.figure.querySelector('script').textContent), y = u.axes[1];
      const px = u.ctx.getImageData(0, 0, u.ctx.canvas.width, u.ctx.canvas.height).data;
      let painted = 0; for (let i = 3; i < px.length; i += 4) if (px[i]) painted++;
      const spans = s.ticks.map(([i, name]) => {
        const at = left + u.valToPos(i, 'x'), half = ruler.measureText(name).width / 2;
        return [name, at - half, at + half]; });
      const xClipped = spans.filter(([, a, b]) => a < 0 || b > u.width).map(([name]) => name);
      const overlapping = spans.slice(1).filter(([, a], k) => a < spans[k][2]).map(([name]) => name);
      const yClipped = d.y_ticks.map(t => t[1]).filter(s => ruler.measureText(s).width > left - y.ticks.size - y.gap);
      return {kind: [...s.figure.classList].find(c => c !== 'step-chart'), metric: s.metric, points: s.points,
              steps: s.steps, painted: painted > 500, x_labels: s.ticks.map(t => t[1]),
              y_labels: d.y_ticks.map(t => t[1]), clipped: [...xClipped, ...yClipped], overlapping}; });"""
"""The step charts as uPlot drew them (static/steps.js): each one's kind and metric, points and step lines,
whether its canvas is painted, its axes' labels, those that do not fit the canvas and the commit names
that run into the one before."""


def no_script_ran(driver: Any) -> None:
    assert driver.execute_script("return window.__xss === undefined")


def wait(driver: Any, seconds: float = 15) -> Any:
    return WebDriverWait(driver, seconds)


def submit(driver: Any, button: Any) -> None:
    """Click a button that submits a form, and wait for the answer's page to have replaced this one:
    an element found before that can belong to the old document (CI: "Node with given id does not
    belong to the document" while waiting for the answer's flash)."""
    driver.execute_script("window.__benchfarmOldPage = true")   # gone with the window's document
    button.click()
    # while Chromium swaps documents, any command can fail with that message: poll through it
    WebDriverWait(driver, 15, ignored_exceptions=(WebDriverException,)).until(lambda d: d.execute_script(
        "return document.readyState === 'complete' && window.__benchfarmOldPage === undefined"))


def signed_in_at(path: str) -> Any:
    """The browser left the sign-in page for `path` (the sign-in URL itself names `path` in ?next=)."""
    return lambda d: "/login" not in d.current_url and path in d.current_url


def sign_in(driver: Any, url: str, next_path: str) -> None:
    driver.get(f"{url}/login?next={next_path}")
    driver.find_element(By.NAME, "name").send_keys("ada")
    driver.find_element(By.NAME, "password").send_keys("correct horse")
    submit(driver, driver.find_element(By.CSS_SELECTOR, "#login button[type=submit]"))
    try:
        wait(driver).until(signed_in_at(next_path))
    except TimeoutException:   # say where the browser is and what the page says (CI once: no clue)
        text = driver.find_element(By.TAG_NAME, "body").text[:500]
        raise AssertionError(f"not signed in for {next_path}: at {driver.current_url}, page says: {text!r}") from None


def test_dashboard_filters_series_graph_compare_and_triage(site: tuple[str, demo_store.Demo], browser: Any) -> None:
    url, demo = site
    browser.get(url + "/")
    assert len(browser.find_elements(By.CSS_SELECTOR, "a.tile")) == 31
    assert browser.find_element(By.XPATH, "//a[contains(@class, 'tile')][contains(., 'onerror')]")  # shown as text
    no_script_ran(browser)
    shot(browser, "dashboard")

    Select(browser.find_element(By.NAME, "family")).select_by_visible_text("gemm")  # submits on change
    wait(browser).until(ec.url_contains("family=gemm"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "a.tile")) == 19  # 18 series and the evil case
    text = browser.find_element(By.NAME, "q")
    text.send_keys("vendor")
    text.submit()
    wait(browser).until(ec.url_contains("q=vendor"))
    tiles = browser.find_elements(By.CSS_SELECTOR, "a.tile")
    assert len(tiles) == 6 and all("stable" in t.get_attribute("class") for t in tiles)

    browser.get(url + "/?state=regressed&family=gemm&device_class=nvidia-h100-sxm")
    browser.find_element(By.CSS_SELECTOR, "a.tile.regressed").click()
    wait(browser).until(lambda d: d.execute_script("return !!window.benchfarmChart"))
    drawn = browser.execute_script("""
        const u = window.benchfarmChart, c = document.querySelector('#chart canvas');
        const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let painted = 0; for (let i = 3; i < px.length; i += 4) if (px[i]) painted++;
        return [u.data[0].length, u.data[1].filter(v => v != null).length, u.series.length, painted];""")
    # 40 commits of the default branch: the pull request's head is not a point of the branch's history (issue 31)
    assert drawn[0] == drawn[1] == 40 and drawn[2] == 5 and drawn[3] > 1000  # median, min, max, control
    canvas = browser.find_element(By.CSS_SELECTOR, "#chart .u-over")
    ActionChains(browser).move_to_element_with_offset(canvas, 40, 0).perform()
    wait(browser).until(lambda d: "samples" in d.find_element(By.ID, "samples").text
                        and "·" in d.find_element(By.ID, "samples").text)
    assert "12 samples" in browser.find_element(By.ID, "samples").text
    # the case's hardware counters beside its latency (issue 32): a step chart per counter, drawn and in
    # view, and the table with the commit where the regression's instructions and DRAM bytes moved marked
    charts = browser.find_elements(By.CSS_SELECTOR, "#counter-charts figure.counter-chart")
    browser.execute_script("arguments[0].scrollIntoView()", charts[0])
    assert len(charts) == 5 and all(c.is_displayed() and c.size["height"] > 50 for c in charts)
    steps = browser.execute_script(STEP_CHARTS_DRAWN)
    assert [c["kind"] for c in steps] == ["counter-chart"] * 5 and steps[0]["points"] == 40 and steps[0]["painted"]
    assert len(steps[0]["steps"]) == 1   # instructions: one step, no jitter
    assert all(len(c["x_labels"]) >= 3 and c["overlapping"] == [] == c["clipped"] for c in steps), steps
    table = browser.find_element(By.ID, "counters")
    assert table.is_displayed() and len(table.find_elements(By.CSS_SELECTOR, "tr")) == 41
    (marked,) = table.find_elements(By.CSS_SELECTOR, "tr.marked")
    moved = [td.text for td in marked.find_elements(By.CSS_SELECTOR, "td.moved")]
    assert len(moved) == 2 and moved[0].endswith("instr +12.0 %") and re.search(r"MiB \+1[45]\.\d %$", moved[1])
    assert browser.find_element(By.ID, "counters-summary").text.startswith("counters at 40 of 40 commits (ncu ")
    browser.execute_script("window.scrollTo(0, 0)")
    no_script_ran(browser)
    shot(browser, "series")

    browser.get(f"{url}/compare?repository={demo_store.REPO}&pr=7")
    assert browser.find_element(By.ID, "verdict").text == "regressed"
    table = browser.find_element(By.CSS_SELECTOR, "table.verdict-table")
    change = table.find_elements(By.CSS_SELECTOR, "thead th")[4]
    change.click()
    change.click()  # descending: the largest slowdown first
    first = table.find_element(By.CSS_SELECTOR, "tbody tr")
    assert "regressed" in first.text and demo.cases[0] in first.text
    shot(browser, "compare")
    Select(browser.find_element(By.CSS_SELECTOR, "#rows-form select[name=status]")).select_by_value("regressed")
    wait(browser).until(ec.url_contains("status=regressed"))  # the filter submits on change, keeping the PR
    statuses = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "table.verdict-table tbody td:nth-child(8)")]
    assert statuses and set(statuses) == {"regressed"} and "pr=7" in browser.current_url

    browser.get(url + "/regressions")
    assert "to triage" in browser.page_source and not browser.find_elements(By.CSS_SELECTOR, "form.triage")
    browser.find_element(By.LINK_TEXT, "sign in").click()
    browser.find_element(By.NAME, "name").send_keys("ada")
    browser.find_element(By.NAME, "password").send_keys("correct horse")
    submit(browser, browser.find_element(By.CSS_SELECTOR, "#login button[type=submit]"))
    wait(browser).until(signed_in_at("/regressions"))
    sections = browser.find_elements(By.CSS_SELECTOR, "section.regression")
    assert len(sections) == 8
    cut = browser.execute_script("""
        const ruler = document.createElement('canvas').getContext('2d');
        return [...document.querySelectorAll('form.triage input[placeholder]')].filter(input => {
          const st = getComputedStyle(input);
          ruler.font = `${st.fontStyle} ${st.fontWeight} ${st.fontSize} ${st.fontFamily}`;
          const room = input.clientWidth - parseFloat(st.paddingLeft) - parseFloat(st.paddingRight);
          return ruler.measureText(input.placeholder).width > room; }).map(input => input.placeholder);""")
    assert cut == [], f"triage placeholders cut: {cut}"   # issue 34: "assignee (assigned)" was
    target = sections[0]
    cp_id = target.get_attribute("id")
    Select(target.find_element(By.NAME, "state")).select_by_visible_text("confirmed")
    target.find_element(By.NAME, "bug_link").send_keys("https://bugs.example/1234")
    submit(browser, target.find_element(By.CSS_SELECTOR, "form.triage button[type=submit]"))
    wait(browser).until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, ".flash"), "is now confirmed"))
    triaged = browser.find_element(By.ID, cp_id)
    assert triaged.find_element(By.CSS_SELECTOR, ".triage-state").text == "confirmed"
    assert "ada → confirmed" in triaged.text and "https://bugs.example/1234" in triaged.text
    shot(browser, "regressions")

    browser.get(url + "/roofline?device_class=nvidia-h100-sxm")
    wait(browser).until(lambda b: b.execute_script("return !!window.benchfarmRoofline"))
    drawn = browser.execute_script(ROOFLINE_DRAWN)
    assert drawn["inside"] == len(demo.cases) == len(drawn["cases"]), drawn   # uPlot placed every case in the plot
    assert drawn["clipped"] == [] and drawn["outside"] == [], drawn   # the y axis' labels fit; the ceilings' too
    shot(browser, "roofline")
    first = drawn["cases"][0]
    ActionChains(browser).move_to_element_with_offset(browser.find_element(By.CSS_SELECTOR, "#roofline .u-over"),
                                                      round(first["x"] - drawn["plot"][0] / 2),
                                                      round(first["y"] - drawn["plot"][1] / 2)).perform()
    tip = browser.find_element(By.ID, "roofline-tip")
    wait(browser).until(lambda b: tip.is_displayed())
    hovered = tip.text.split(":")[0]   # the first case, or one drawn on top of it
    assert hovered in demo.cases and "of the roof" in tip.text, tip.text
    ActionChains(browser).click().perform()   # where the mouse is: on the hovered case
    wait(browser).until(ec.url_contains("/series/"))
    assert browser.find_element(By.ID, "case-id").text == hovered
    browser.get(url + "/login")
    assert "benchfarm user create" in browser.find_element(By.ID, "login-help").text
    shot(browser, "login")

    # a state no series of the filtered family is in: no tiles, and the count says none, not all
    browser.get(url + "/?state=improved&q=no-such-case")
    assert browser.find_element(By.ID, "no-series").text == "No series match these filters."
    shown = browser.find_element(By.XPATH, "//span[@class='count'][contains(., 'series shown')]/b").text
    assert shown == "0"

    # errors are pages with the navigation, whatever went wrong in the address
    for path, status, said in (("/series/99999", "404", "no series 99999"),
                               ("/runs/nope", "404", "run 'nope' does not exist"),
                               ("/compare?page=abc", "422", "page"), ("/jobs?page=abc", "422", "page")):
        browser.get(url + path)
        assert browser.find_element(By.ID, "error-status").text.startswith(status), path
        assert said in browser.find_element(By.TAG_NAME, "body").text, path
    browser.find_element(By.LINK_TEXT, "Dashboard").click()
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "a.tile"))

    # the API docs, drawn by the Swagger UI the service serves itself (nothing from another host)
    browser.get(url + "/docs")
    wait(browser, 30).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".opblock")) > 10)
    assert "benchfarm API" in browser.title
    foreign = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name).filter(n => !n.startsWith(arguments[0]))",
        url)
    assert foreign == [], foreign

    farm = demo.farm
    assert farm is not None
    browser.get(url + "/devices")
    assert len(browser.find_elements(By.CSS_SELECTOR, "section.agent")) == 2
    assert browser.find_element(By.CSS_SELECTOR, f"a[href='/jobs/{farm.running_job}']")
    shot(browser, "devices")
    browser.get(url + "/jobs")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#jobs tbody tr[data-status=failed]")) == 1
    no_script_ran(browser)
    shot(browser, "jobs")
    browser.get(f"{url}/jobs/{farm.failed_job}")
    assert "<script>window.__xss = 4</script>" in browser.find_element(By.ID, "job-error").text  # as text
    no_script_ran(browser)
    shot(browser, "job")


def test_change_point_labels_of_a_series_do_not_overlap(site: tuple[str, demo_store.Demo], site_engine: Engine,
                                                       browser: Any) -> None:
    """Change points a commit or two apart (a slow commit retracted by the next, then a slowdown that
    stays) on the vendor control's series: their labels stack instead of overlapping (issue 34).
    Runs after the tests that count the demo's change points: it adds two."""
    from pipeline.results.store.db import session_scope
    from pipeline.results.store.models import Case, ChangePoint, Series

    url, demo = site
    demo_store.extend_history(site_engine, demo, [1.5, 1.0, 1.3, 1.3, 1.3])
    with session_scope(site_engine) as s:
        series_id = s.scalar(sa.select(Series.id).join(Case).join(ChangePoint, ChangePoint.series_id == Series.id)
                             .where(Case.case_id == demo_store.CONTROL).limit(1))
    browser.get(f"{url}/series/{series_id}")
    wait(browser).until(lambda d: d.execute_script("return !!window.benchfarmChangePointLabels"))
    labels = browser.execute_script("return window.benchfarmChangePointLabels")
    assert len(labels) >= 2, labels
    overlapping = [(a["text"], b["text"]) for i, a in enumerate(labels) for b in labels[i + 1:]
                   if a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
                   and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]]
    assert overlapping == [], overlapping
    assert len({label["y"] for label in labels}) >= 2, labels   # they were close enough to need a second row


@pytest.fixture(scope="module")
def compile_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, list[str], str]]:
    """Two commits of a Triton GEMM built for cuda:sm_90 and the build-only hip:gfx1250 (the second
    halves the tile: registers, binary, shared bytes and the code change), bundles and their listings
    stored; results of the cuda:sm_90 entries stored for an H100 class as an agent would send them
    (no GPU here), the second commit's paired with the first's. Also yields the second commit's PR
    comment."""
    pytest.importorskip("triton", reason="the builder's Triton is not installed")
    from pipeline.build.bundle import build_bundle
    from pipeline.build.suite_loader import commit_history, locate_suite, resolve_commit
    from pipeline.contracts import DeviceClass
    from pipeline.contracts.result import PairedBase
    from pipeline.pr_comments.report import report_for_commit
    from pipeline.results.store import ingest
    from pipeline.results.store.db import session_scope
    from tests.helpers import factories as f

    home = tmp_path_factory.mktemp("web-e2e-compile")
    targets = ["cuda:sm_90", "hip:gfx1250"]
    repo = make_suite_repo(home, triton_suite_files([TritonCase("tile")], block=64, targets=targets))
    location = locate_suite(repo / "kernels")
    shas = [resolve_commit(location)]
    write_files(repo, triton_suite_files([TritonCase("tile")], block=32, targets=targets))
    shas.append(commit_all(repo, "tile: 32x32 blocks"))
    engine = open_store(f"sqlite:///{home}/benchfarm.db")
    h100 = DeviceClass(name="nvidia-h100-sxm", kind="gpu", targets=["cuda:sm_90"], runtime="cuda",
                       description="an H100 the builder never sees")
    entries = []
    for sha in shas:
        path, manifest = build_bundle(location=location, sha=sha, targets=targets, out_dir=home / "bundles",
                                      cache_dir=home / "cache", workers=2)
        with session_scope(engine) as session:
            ingest.record_commits(session, repository=manifest.repository, commits=commit_history(location, sha))
            ingest.ingest_manifest(session, manifest=manifest, path=str(path), bundle_dir=Path(path))
            ingest.upsert_device_class(session, h100)
        entries.append(next(e for e in manifest.entries if e.target == "cuda:sm_90"))
    for number, (sha, entry) in enumerate(zip(shas, entries)):
        level = 3.44e-3 * (1 - 0.08 * number)   # the smaller tile: 8 % faster
        samples = [level * (1 + 0.001 * ((i * 7) % 5)) for i in range(40)]
        paired = PairedBase(commit=shas[0], samples=[3.44e-3 * (1 + 0.001 * ((i * 3) % 5)) for i in range(40)],
                            binary_digest=entries[0].binary_digest(), code_digest=entries[0].code_digest()) \
            if number else None
        result = f.ok(entry.case, samples, target="cuda:sm_90", rounds=[8] * 5).model_copy(update={
            "binary_digest": entry.binary_digest(), "code_digest": entry.code_digest(), "paired_base": paired})
        with session_scope(engine) as session:
            run = ingest.create_run(session, repository=location.repository, commit_sha=sha, kind="pr",
                                    device_classes=[h100.name])
            ingest.ingest_result(session, document=f.result_document(
                run_id=run.id, job_id=run.jobs[0].id, commit_sha=sha, results=[result], device_class=h100.name,
                repository=location.repository), analysis=None)
            ingest.set_job_status(session, job_id=run.jobs[0].id, status="done")
    settings = Settings(home=home)
    with session_scope(engine) as session:
        body = report_for_commit(session, settings=settings, repository=location.repository, sha=shas[1], pr=5).body
    with live_server(create_app(settings, engine)) as url:
        yield url, location.repository, shas, body
    engine.dispose()


def test_compile_statistics_pages_compare_and_history(compile_site: tuple[str, str, list[str], str],
                                                      browser: Any) -> None:
    url, repository, (first, second), _ = compile_site
    case = triton_case_id(TritonCase("tile"))
    browser.get(url + "/")
    browser.find_element(By.LINK_TEXT, "Compile").click()
    wait(browser).until(ec.presence_of_element_located((By.ID, "compile-series")))
    rows = browser.find_elements(By.CSS_SELECTOR, "#compile-series tr td:nth-child(2)")
    assert sorted(td.text for td in rows) == ["cuda:sm_90", "hip:gfx1250"]   # one series per target

    browser.get(f"{url}/compare?repository={repository}&head={second[:12]}")
    summary = browser.find_element(By.ID, "compile-summary").text
    assert summary.startswith("1 case changed") and "registers" in summary and "(on 2 targets)" in summary
    assert first[:10] in browser.find_element(By.ID, "compile-section").find_element(By.XPATH, "following-sibling::p").text
    table = browser.find_element(By.ID, "compile-changes")
    metrics = [td.text for td in table.find_elements(By.CSS_SELECTOR, "tbody td:nth-child(3)")]
    assert "registers" in metrics and "binary_size" in metrics and "compile_time" not in metrics
    change = table.find_elements(By.CSS_SELECTOR, "thead th")[5]
    change.click()   # ascending: the largest decrease first (the smaller tile shrinks shared memory most)
    cells = [float(td.get_attribute("data-value")) for td in table.find_elements(By.CSS_SELECTOR, "tbody td:nth-child(6)")]
    assert cells == sorted(cells) and cells[0] < 0
    shot(browser, "compile-compare")
    gfx = table.find_element(By.XPATH, ".//tr[td[2]='hip:gfx1250'][td[3]='registers']")
    gfx.find_element(By.TAG_NAME, "a").click()
    wait(browser).until(ec.presence_of_element_located((By.ID, "compile-steps")))
    assert "hip:gfx1250" in browser.page_source and case in browser.find_element(By.TAG_NAME, "h2").text
    charts = browser.find_elements(By.CSS_SELECTOR, "figure.compile-chart")
    assert len(charts) == 5 and all(c.size["width"] > 300 for c in charts)
    drawn = browser.execute_script(STEP_CHARTS_DRAWN)
    assert [c["kind"] for c in drawn] == ["compile-chart"] * 5 and all(c["painted"] for c in drawn)
    assert sum(len(c["steps"]) for c in drawn) >= 2
    clipped = [label for c in drawn for label in c["clipped"] + c["overlapping"]]
    assert clipped == [], f"labels outside the compile charts: {clipped}"
    # each chart names its commits under the axis and its figures in their unit (issue 34: no x labels,
    # and a compile time read "0.804627")
    for chart in drawn:
        assert chart["x_labels"] == [first[:7], second[:7]], chart
    times = drawn[[c["metric"] for c in drawn].index("compile_time")]
    y_labels = times["y_labels"]
    assert y_labels and all(label.endswith((" s", " ms", " us")) and len(label) <= 8 for label in y_labels), y_labels
    steps = browser.find_elements(By.CSS_SELECTOR, "#compile-steps tr td:nth-child(2)")
    assert "registers" in [td.text for td in steps]
    assert f"{first[:10]}..{second[:10]}" in browser.find_element(By.ID, "compile-steps").text
    no_script_ran(browser)
    shot(browser, "compile-history")


SPLIT_FIGURES = r"""
const root = arguments[0] || document.body, split = [];
let checked = 0;
// a figure: a number, its exponent and its unit ("3.44 ms", "2.6e-10", "+3.1 %", "+12 instr")
const figure = /[+\-\u2212\u00b1]?\d[\d.]*(?:e[\-\u2011]\d+)?(?:[ \u00a0](?:%|ms|us|ns|s|instr)(?![\w]))?/g;
const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  if (node.parentElement.closest('pre, script, style, select, datalist, table.side-by-side')) continue;
  for (const m of node.data.matchAll(figure)) {
    const range = document.createRange();
    range.setStart(node, m.index);
    range.setEnd(node, m.index + m[0].length);
    const tops = new Set([...range.getClientRects()].filter(b => b.width > 0).map(b => Math.round(b.top)));
    if (tops.size) checked++;
    if (tops.size > 1) split.push(m[0]);
  }
}
return [checked, split];"""
"""[figures laid out, those split across lines] of the page (or of arguments[0])."""

WRAPPED_CELLS = r"""
const [, header] = arguments, wrapped = [];
for (const table of document.querySelectorAll('table')) {
  const column = [...table.querySelectorAll('thead th')].findIndex(th => th.textContent.trim() === header);
  if (column < 0) continue;
  for (const tr of table.querySelectorAll('tbody tr')) {
    const td = tr.children[column], range = document.createRange();
    range.selectNodeContents(td);
    const tops = [...range.getClientRects()].map(b => b.top);
    if (Math.max(...tops) - Math.min(...tops) > 8) wrapped.push(td.textContent);
  }
}
return wrapped;"""
"""The cells of the column headed arguments[1] whose text takes more than one line."""

GITHUB_COMMENT_CSS = """
body { margin: 0; background: #fff; }
.markdown-body { width: 880px; padding: 16px; box-sizing: border-box; font-size: 14px; line-height: 1.5;
  font-family: -apple-system, BlinkMacSystemFont, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif;
  word-wrap: break-word; color: #1f2328; }
.markdown-body table { display: block; width: max-content; max-width: 100%; overflow: auto; border-spacing: 0;
  border-collapse: collapse; margin: 0 0 16px; }
.markdown-body table th, .markdown-body table td { padding: 6px 13px; border: 1px solid #d0d7de; }
.markdown-body table th { font-weight: 600; }
.markdown-body code { padding: .2em .4em; font-size: 85%; white-space: break-spaces; border-radius: 6px;
  background: rgba(175, 184, 193, .2); font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.markdown-body pre { padding: 16px; overflow: auto; font-size: 85%; line-height: 1.45; background: #f6f8fa; }
.markdown-body pre code { white-space: pre; padding: 0; background: transparent; }
"""
"""The rules of GitHub's comment body (its markdown-body stylesheet) that decide where a table wraps,
at the width of a pull request's comment column."""


def save_at(driver: Any, tmp_path: Path, name: str) -> None:
    """A screenshot at the window's present size (BENCHFARM_SCREENSHOTS, else the test's folder)."""
    folder = Path(os.environ.get("BENCHFARM_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(folder / f"{name}.png"))


def show_comment(driver: Any, body: str, folder: Path, name: str) -> None:
    """The comment's Markdown rendered as GitHub does (CommonMark, tables, HTML kept) in its column, every
    <details> open, loaded in the browser."""
    from markdown_it import MarkdownIt

    rendered = MarkdownIt("commonmark").enable("table").render(body).replace("<details>", "<details open>")
    page = folder / f"{name}.html"
    page.write_text(f"<!doctype html><meta charset=utf-8><style>{GITHUB_COMMENT_CSS}</style>"
                    f"<article class=markdown-body>{rendered}</article>")
    driver.get(page.as_uri())


def test_layout_no_figure_split_compare_page_at_1280_and_pr_comment_at_880(
        site: tuple[str, demo_store.Demo], compile_site: tuple[str, str, list[str], str], browser: Any,
        tmp_path: Path) -> None:
    """Issue 34: the compare page in a 1280 px window and the PR comment in GitHub's comment column
    keep every figure on one line (a table cell wraps between words and figures, never inside one)."""
    from pipeline.pr_comments.report import make_report
    from pipeline.results.store.compare import PRVerdictOut

    url, demo = site
    code_url, repository, (_, second), code_body = compile_site
    browser.set_window_size(1280, 1000)
    try:
        for page, name in ((f"{url}/compare?repository={demo_store.REPO}&pr=7", "compare-1280"),
                           (f"{code_url}/compare?repository={repository}&head={second[:12]}", "compare-code-1280")):
            browser.get(page)
            checked, split = browser.execute_script(SPLIT_FIGURES)
            assert checked > 8 and split == [], (page, split)
            if name == "compare-1280":   # a target and a verdict on one line each; no empty control column
                wrapped = browser.execute_script("""
                    return [...document.querySelectorAll('table.verdict-table td.target-col, table.verdict-table td[class^=status-]')]
                      .filter(td => { const r = document.createRange(); r.selectNodeContents(td);
                                      const tops = [...r.getClientRects()].map(b => b.top);
                                      return Math.max(...tops) - Math.min(...tops) > 8; })   // a second line
                      .map(td => td.textContent);""")
                assert browser.find_elements(By.CSS_SELECTOR, "table.verdict-table td[class^=status-]") and wrapped == []
                headers = " ".join(th.text for th in browser.find_elements(By.CSS_SELECTOR, "table.verdict-table th"))
                controls = browser.find_elements(By.CSS_SELECTOR, "table.verdict-table td.num.small")
                assert "vendor control" in headers and any(td.text for td in controls)
            save_at(browser, tmp_path, name)

        verdict = PRVerdictOut.model_validate(requests.get(
            f"{url}/api/v1/compare", params={"repository": demo_store.REPO, "head": demo.pr_head}, timeout=60).json())
        demo_body = make_report(verdict.comparisons, settings=Settings(home=tmp_path, public_url=url),
                                pr=7).body
        for body, name in ((demo_body, "pr-comment-880"), (code_body, "pr-comment-code-880")):
            show_comment(browser, body, tmp_path, name)
            width = browser.execute_script("return document.querySelector('.markdown-body').getBoundingClientRect().width")
            assert width == 880
            checked, split = browser.execute_script(SPLIT_FIGURES)
            assert checked > 8 and split == [], (name, split)
            wrapped = browser.execute_script(WRAPPED_CELLS, None, "device class")
            assert wrapped == [], (name, wrapped)   # nvidia-h100-sxm on one line
            save_at(browser, tmp_path, name)
    finally:
        browser.set_window_size(1400, 1000)


def test_compare_page_shows_the_code_and_the_listing_diff_side_by_side(
        compile_site: tuple[str, str, list[str], str], browser: Any) -> None:
    """Issue 32: the tile edit's row says what changed in its code and links to its listings, side by side."""
    url, repository, (first, second), body = compile_site
    browser.get(f"{url}/compare?repository={repository}&head={second[:12]}")
    assert browser.find_element(By.ID, "verdict").text == "improved"
    cell = browser.find_element(By.CSS_SELECTOR, "table.verdict-table td.code-col")
    assert cell.get_attribute("data-state") == "changed"
    summary = cell.find_element(By.CSS_SELECTOR, ".code-summary").text
    assert re.match(r"^[+-]\d+\s+instr:\s+[+-]\d+\s+\w+", summary) and "regs" in summary and "spills" in summary, summary
    cell.find_element(By.CSS_SELECTOR, "a.code-link").click()
    wait(browser).until(ec.url_contains("#code-1"))
    diff = browser.find_element(By.ID, "code-1")
    assert diff.get_attribute("open") is not None and summary in diff.find_element(By.TAG_NAME, "summary").text
    heads = [th.text for th in diff.find_elements(By.CSS_SELECTOR, "table.side-by-side thead th")]
    assert heads[1].startswith("base") and heads[3].startswith("head")
    kinds = {r.get_attribute("class") for r in diff.find_elements(By.CSS_SELECTOR, "table.side-by-side tbody tr")}
    assert kinds & {"replace", "insert", "delete"} and "equal" in kinds
    changed = diff.find_element(By.CSS_SELECTOR, "tr.replace, tr.insert, tr.delete")
    left, right = changed.find_element(By.CSS_SELECTOR, "td.base"), changed.find_element(By.CSS_SELECTOR, "td.head")
    assert left.location["x"] < right.location["x"] and (left.text or right.text)   # base left, head right
    colour = browser.execute_script("return getComputedStyle(arguments[0]).backgroundColor",
                                    right if right.text else left)
    assert colour not in ("rgba(0, 0, 0, 0)", "transparent")
    no_script_ran(browser)
    shot(browser, "compare-code")
    # the comment of the same commit: the code column and the folded diff of the kernel
    assert "| code |" in body and "<summary>gemm/tile/" in body and "```diff" in body


ADHOC_CASES = [GemmCase("alpha", 32, 32, 32), GemmCase("beta", 16, 32, 64)]


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[str]:
    """`benchfarm up --no-run` on a free port with a two-case suite and short measurements; a user
    made first with `benchfarm user create`."""
    repo = make_suite_repo(tmp_path, gemm_suite_files(ADHOC_CASES), name="suite-repo")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env.update(FAST, BENCHFARM_HOME=str(tmp_path / "home"), BENCHFARM_PORT=str(free_port()),
               BENCHFARM_DISPATCH__CLAIM_WAIT_S="1", BENCHFARM_DISPATCH__CLAIM_POLL_S="0.1",
               BENCHFARM_AGENT__HEARTBEAT_S="1", BENCHFARM_BUILD_WORKERS="2", BENCHFARM_LOG_LEVEL="INFO")
    made = subprocess.run([*benchfarm_argv(), "user", "create", "--name", "ada", "--password-stdin"],
                          input="correct horse\n", env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          check=False)
    assert made.returncode == 0, made.stderr
    log_path = tmp_path / "up.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen([*benchfarm_argv(), "up", "--no-run", "--suite", str(repo / "kernels")],
                                cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{env['BENCHFARM_PORT']}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            try:
                if requests.get(f"{url}/api/v1/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                time.sleep(0.2)
        yield url
    finally:
        print(log_path.read_text()[-6000:])   # the service's log, shown with a failing test's report
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_trigger_an_adhoc_run_and_watch_it_complete_with_the_embedded_agent(embedded: str, browser: Any) -> None:
    url = embedded
    browser.get(url + "/devices")
    for _ in range(60):  # the in-process agent registers once the service answers
        if browser.find_elements(By.CSS_SELECTOR, "section.agent.online[data-agent=embedded] tr[data-uid]"):
            break
        time.sleep(0.5)
        browser.refresh()
    agent = browser.find_element(By.CSS_SELECTOR, "section.agent[data-agent=embedded]")
    assert "online" in agent.find_element(By.CSS_SELECTOR, ".agent-state").text
    assert "idle" in agent.find_element(By.CSS_SELECTOR, "tr[data-uid]").text
    device_class = agent.find_element(By.CSS_SELECTOR, "tr[data-uid] td:nth-child(2)").text

    browser.get(url + "/runs/new")
    assert "/login" in browser.current_url  # triggering needs a signed-in user
    sign_in(browser, url, "/runs/new")
    form = browser.find_element(By.ID, "adhoc")
    ref = form.find_element(By.NAME, "ref")
    assert ref.get_attribute("value") == "HEAD"
    box = form.find_element(By.CSS_SELECTOR, f"input[name=device_class][value='{device_class}']")
    assert box.is_selected()
    # its example selects cases of this machine (issue 34: "gemm/*/bf16/*" selected none of a CPU's)
    example = form.find_element(By.NAME, "cases").get_attribute("placeholder")
    assert fnmatch.fnmatchcase(case_id(ADHOC_CASES[0]), example), example
    form.find_element(By.NAME, "cases").send_keys("gemm/*")
    shot(browser, "adhoc-form")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()

    wait(browser).until(ec.visibility_of_element_located((By.ID, "progress")))
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#progress-jobs td.job-status"))
    shot(browser, "adhoc")
    run_id = browser.find_element(By.ID, "run-link").get_attribute("href").rsplit("/", 1)[1]
    seen: set[str] = set()
    deadline = time.monotonic() + 75
    while "/runs/new" in browser.current_url:
        assert time.monotonic() < deadline, f"the run did not end; states seen: {seen}"
        try:
            states = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#progress-jobs td.job-status")]
            now = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#progress-jobs tbody td:last-child")]
        except WebDriverException:  # the page went on to the run's page while being read (stale element, or
            time.sleep(0.2)         # Chrome's "Node with given id does not belong to the document"): look again
            continue
        seen.update(states)
        assert "failed" not in states, now
        time.sleep(0.2)
    assert {"queued", "running"} & seen, seen  # the progress was shown before the results
    wait(browser, 10).until(ec.url_contains(f"/runs/{run_id}"))
    assert "done" in browser.find_element(By.CSS_SELECTOR, "p .status-done").text
    rows = browser.find_elements(By.CSS_SELECTOR, "table tr td.mono")
    shown = {r.text for r in rows}
    assert {case_id(c) for c in ADHOC_CASES} <= shown, shown
    shot(browser, "run")

    # a second run of the same commit, of one case: its page shows that case only
    browser.get(url + "/runs/new")
    form = browser.find_element(By.ID, "adhoc")
    example = form.find_element(By.NAME, "cases").get_attribute("placeholder")
    assert example == "gemm/*/f32/*", example   # from what this machine measured
    form.find_element(By.NAME, "cases").send_keys("gemm/alpha/*")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser).until(ec.visibility_of_element_located((By.ID, "progress")))
    second = browser.find_element(By.ID, "run-link").get_attribute("href").rsplit("/", 1)[1]
    wait(browser, 75).until(ec.url_contains(f"/runs/{second}"))
    assert "done" in browser.find_element(By.CSS_SELECTOR, "p .status-done").text
    shown = {r.text for r in browser.find_elements(By.CSS_SELECTOR, "table tr td.mono")}
    assert shown == {case_id(ADHOC_CASES[0])}, shown

    browser.get(url + "/jobs")
    job = browser.find_element(By.CSS_SELECTOR, "#jobs tbody tr[data-status=done]:last-child")
    assert job.get_attribute("data-status") == "done" and "embedded" in job.text and "gemm/*" in job.text
    job.find_element(By.CSS_SELECTOR, "td a").click()
    events = browser.find_element(By.ID, "events").text
    for event in ("queued", "build requested", "build started", "build done", "attempt 1 of 3 started", "done"):
        assert event in events, events
    assert "2 ok" in browser.find_element(By.ID, "case-counts").text


@pytest.fixture(scope="module")
def bisected_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, demo_store.DemoBisection]]:
    """A demo store whose first regressed case was not measured on five commits before its step, so
    that its change point spans six; that change point bisected (demo_store.add_bisection)."""
    home = tmp_path_factory.mktemp("web-bisect")
    engine = open_store(f"sqlite:///{home}/benchfarm.db")
    settings = Settings(home=home, api_token=ADMIN, web={"secret_key": "e2e"}, dispatch={"suite_path": str(home)})
    unmeasured = range(7, 12)
    demo = demo_store.build(engine, commits=20, evil=False, unmeasured=unmeasured)
    found = demo_store.add_bisection(engine, demo, settings, unmeasured=unmeasured)
    with live_server(create_app(settings, engine)) as url:
        created = requests.post(f"{url}/api/v1/users", json={"name": "ada", "password": "correct horse"},
                                headers={"authorization": f"Bearer {ADMIN}"}, timeout=30)
        assert created.status_code == 201, created.text
        yield url, found
    engine.dispose()


def test_a_bisection_s_steps_and_culprit_on_the_regressions_and_series_pages(
        bisected_site: tuple[str, demo_store.DemoBisection], browser: Any) -> None:
    url, found = bisected_site
    browser.delete_all_cookies()
    browser.get(f"{url}/regressions")
    section = browser.find_element(By.ID, f"cp-{found.change_point_id}")
    block = section.find_element(By.ID, f"bisection-{found.bisection_id}")
    assert block.get_attribute("data-state") == "done" and block.get_attribute("data-outcome") == "culprit"
    culprit = block.find_element(By.CSS_SELECTOR, ".culprit a")
    assert culprit.text == found.culprit[:10] and culprit.get_attribute("href").endswith(f"/commit/{found.culprit}")
    steps = block.find_elements(By.CSS_SELECTOR, "table.bisection-steps tr[data-commit]")
    assert [s.get_attribute("data-commit") for s in steps][:2] == [found.culprit, found.unbuildable]
    assert len(steps) == 5
    skipped = block.find_element(By.CSS_SELECTOR, f"tr[data-commit='{found.unbuildable}']")
    assert "unbuildable" in skipped.text and "iree-compile" in skipped.text
    assert "new level" in steps[0].text and "old level" in steps[-1].text
    assert f"{found.unbuildable[:10]} (unbuildable)" in block.find_element(By.CSS_SELECTOR, ".bisection-summary").text
    assert not browser.find_elements(By.CSS_SELECTOR, "form.bisect")   # the button is for signed-in users
    shot(browser, "bisection")

    sign_in(browser, url, "/regressions")
    section = browser.find_element(By.ID, f"cp-{found.change_point_id}")
    # triage can link the culprit: its commit is offered as the bug link
    link = section.find_element(By.CSS_SELECTOR, "form.triage input[name=bug_link]").get_attribute("value")
    assert link.endswith(f"/commit/{found.culprit}")
    other = next(s for s in browser.find_elements(By.CSS_SELECTOR, "section.regression")
                 if s.get_attribute("id") != f"cp-{found.change_point_id}" and s.find_elements(By.CSS_SELECTOR, "form.bisect"))
    other_id = other.get_attribute("id")   # the same case on the other device class: its range spans six commits too
    submit(browser, wait(browser).until(ec.element_to_be_clickable((By.CSS_SELECTOR, f"#{other_id} form.bisect button"))))
    wait(browser).until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, ".flash"), "queued"))
    asked = browser.find_element(By.ID, other_id)
    assert asked.find_element(By.CSS_SELECTOR, ".bisection").get_attribute("data-state") == "queued"
    assert not asked.find_elements(By.CSS_SELECTOR, "form.bisect")   # one active bisection per change point
    # regressions whose range holds one commit offer no bisection: that commit made the change
    assert len(browser.find_elements(By.CSS_SELECTOR, "form.bisect")) == 0

    browser.get(f"{url}/series/{found.series_id}")
    cell = browser.find_element(By.CSS_SELECTOR, f"#cp-{found.change_point_id} td.bisection-cell")
    assert "culprit" in cell.text and found.culprit[:10] in cell.text
    cell.find_element(By.LINK_TEXT, "culprit").click()
    block = browser.find_element(By.ID, f"bisection-{found.bisection_id}")
    assert len(block.find_elements(By.CSS_SELECTOR, "table.bisection-steps tr[data-commit]")) == 5
    shot(browser, "series-bisection")
