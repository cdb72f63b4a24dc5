"""The farm pages over real HTTP on both stores: devices and agents with the queue per device class,
jobs and a job's events and errors (HTML shown as text), the ad-hoc run form and its way into the
API (the session's user with the CSRF token in a header; never the cookie alone); and
`benchfarm user create`."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import requests

from pipeline.service import users
from pipeline.results.store.db import open_store, session_scope

from . import demo_store
from .conftest import Service
from .test_pages import _csrf, _sign_in

from tests.helpers.cli_zygote import benchfarm_argv


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_devices_page_shows_agents_devices_current_jobs_and_queues(service: Service) -> None:
    farm = demo_store.add_farm(service.engine, service.demo)
    page = requests.get(f"{service.url}/devices", timeout=30)
    assert page.status_code == 200
    text = _text(page.text)
    assert "1 of 2 agents online" in text
    gpu, cpu = service.demo.device_classes[0], service.demo.device_classes[-1]
    # gpu-box-1: two H100s, one running the ad-hoc job; cpu-box offline with its device
    assert f'href="/jobs/{farm.running_job}"' in page.text
    assert 'data-agent="gpu-box-1"' in page.text and 'class="agent offline" id="agent-cpu-box"' in page.text
    assert page.text.count('<span class="muted">idle</span>') == 1
    # queue: the GPU class has 1 running and 1 waiting for a build; the CPU class 1 waiting, no device online
    assert f"{gpu} 0 1 1" in text and "2 / 1 / 2" in text
    assert f"{cpu} 0 1 0" in text and "0 / 0 / 1" in text


def test_jobs_page_and_a_jobs_events_and_error(service: Service) -> None:
    farm = demo_store.add_farm(service.engine, service.demo)
    jobs = requests.get(f"{service.url}/jobs", timeout=30).text
    assert "waiting for build (pending)" in jobs and f"/jobs/{farm.failed_job}" in jobs
    assert "<script>window.__xss = 4" not in jobs and "&lt;script&gt;window.__xss = 4&lt;/script&gt;" in jobs
    failed = requests.get(f"{service.url}/jobs", params={"status": "failed"}, timeout=30).text
    assert failed.count('data-status="failed"') == 1
    only_gpu = requests.get(f"{service.url}/jobs", params={"device_class": service.demo.device_classes[-1]},
                            timeout=30).text
    assert f"/jobs/{farm.waiting_job}" in only_gpu and f"/jobs/{farm.failed_job}" not in only_gpu

    page = requests.get(f"{service.url}/jobs/{farm.failed_job}", timeout=30)
    assert page.status_code == 200
    text = _text(page.text)
    assert "<script>window.__xss" not in page.text and "&lt;script&gt;" in page.text
    for event in ("queued", "build requested", "build done", "attempt 1 of 1 started", "failed"):
        assert f" {event} " in text, event
    assert "agent gpu-box-1 on GPU-1a2f-0000" in text
    waiting = _text(requests.get(f"{service.url}/jobs/{farm.waiting_job}", timeout=30).text)
    assert "waiting for build (pending)" in waiting and "Other jobs of the run" in waiting
    assert requests.get(f"{service.url}/jobs/no-such-job", timeout=30).status_code == 404


def test_a_jobs_page_shows_its_environment_as_text_and_links_its_results(service: Service) -> None:
    from pipeline.results.store import ingest
    from tests.helpers import factories as f

    with session_scope(service.engine) as s:
        run = ingest.create_run(s, repository=demo_store.REPO, commit_sha=demo_store.main_sha(3), kind="adhoc",
                                device_classes=[service.demo.device_classes[0]])
        job = run.jobs[0]
        result = f.ok(service.demo.cases[0], f.series_samples(1e-3)).model_copy(
            update={"environment": {"input_seed": "5"}})
        document = f.result_document(run_id=run.id, job_id=job.id, commit_sha=demo_store.main_sha(3),
                                     repository=demo_store.REPO, results=[result],
                                     device_class=job.device_class.name).model_copy(update={"environment": {
                                         "placement_budget_bytes": "6442450944",
                                         "host": "<script>window.__xss = 5</script>"}})
        ingest.ingest_result(s, document=document, analysis=None)
        job_id = job.id
    page = requests.get(f"{service.url}/jobs/{job_id}", timeout=30)
    assert page.status_code == 200
    text = _text(page.text)
    assert "Environment" in text and "placement_budget_bytes 6442450944" in text, text
    assert "<script>window.__xss = 5" not in page.text and "&lt;script&gt;window.__xss = 5" in page.text
    assert f'href="/api/v1/jobs/{job_id}/results"' in page.text
    results = requests.get(f"{service.url}/api/v1/jobs/{job_id}/results", timeout=30).json()
    assert results["results"][0]["environment"] == {"input_seed": "5"}


def test_adhoc_form_needs_a_user_and_posts_to_the_api_with_the_csrf_header(service: Service) -> None:
    demo_store.add_farm(service.engine, service.demo)
    gone = requests.get(f"{service.url}/runs/new", params={"cases": "gemm/*"}, timeout=30, allow_redirects=False)
    assert gone.status_code == 303 and gone.headers["location"].startswith("/login?next=/runs/new%3Fcases")

    with session_scope(service.engine) as s:
        users.create_user(s, name="ada", password="correct horse")
    browser = requests.Session()
    assert _sign_in(service, browser, name="ada", password="correct horse").status_code == 303
    form = browser.get(f"{service.url}/runs/new", timeout=30)
    assert form.status_code == 200 and 'data-ref-field="commit"' in form.text  # no suite checkout here
    gpu = service.demo.device_classes[0]
    assert f'value="{gpu}" checked' in form.text and "2 devices online" in form.text
    csrf = _csrf(form.text)
    body = {"commit": demo_store.main_sha(3)[:12], "device_classes": [gpu], "cases": "gemm/*"}
    # the cookie alone (what another site's form or script could send) is refused
    assert browser.post(f"{service.url}/api/v1/runs", json=body, timeout=30).status_code == 401
    assert browser.post(f"{service.url}/api/v1/runs", json=body, headers={"x-csrf-token": "forged"},
                        timeout=30).status_code == 401
    made = browser.post(f"{service.url}/api/v1/runs", json=body, headers={"x-csrf-token": csrf}, timeout=30)
    # past the guard as ada; this service has no suite checkout and no bundle of the commit on disk
    # (the browser test runs one to the end with the embedded agent)
    assert made.status_code == 422 and "no bundle of" in made.text and "dispatch.suite_path" in made.text, made.text
    unknown = browser.post(f"{service.url}/api/v1/runs", json={**body, "device_classes": ["nope-1"]},
                           headers={"x-csrf-token": csrf}, timeout=30)
    assert unknown.status_code == 422 and "no agent has registered nope-1" in unknown.text
    nowhere = browser.post(f"{service.url}/api/v1/runs", json={**body, "commit": "abcdef12"},
                           headers={"x-csrf-token": csrf}, timeout=30)
    assert nowhere.status_code == 422 and "commit: no recorded commit" in nowhere.text, nowhere.text
    # a bearer token that is wrong is not rescued by the session
    assert browser.post(f"{service.url}/api/v1/runs", json=body, timeout=30,
                        headers={"x-csrf-token": csrf, "authorization": "Bearer nope"}).status_code == 401


def test_user_create_cli_makes_a_user_who_signs_in(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_")}
    env["BENCHFARM_HOME"] = str(tmp_path)

    def create(name: str, password: str, *flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*benchfarm_argv(), "user", "create", "--name", name,
                               "--password-stdin", *flags], input=password + "\n", env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60, check=False)

    made = create("ada", "correct horse", "--scope", "admin")
    assert made.returncode == 0 and "user 'ada' (admin) created" in made.stderr, made.stderr
    assert create("ada", "another one").returncode == 1
    short = create("bob", "short")
    assert short.returncode == 1 and "at least 8 characters" in short.stderr
    engine = open_store(f"sqlite:///{tmp_path}/benchfarm.db")
    with session_scope(engine) as s:
        who = users.check_password(s, name="ada", password="correct horse")
        assert who is not None and who.allows("admin")
        assert users.check_password(s, name="bob", password="short") is None
    engine.dispose()
