"""Uploads at full-suite scale and refused uploads, with real processes on loopback (issue 12).

- a paired result document of a full CUDA suite's size (164 cases, 2.5 million head samples, as
  many paired base samples, a clock and a temperature per sample) goes through `POST /results` to
  `benchfarm serve` with DEFAULT settings (16 MiB body limit), on SQLite and PostgreSQL: the agent's
  chunked delivery stores every sample, and the job is completed only afterwards;
- the service refuses an agent's upload (413: its body limit set tiny): the job fails saying how to
  resend, the measurements stay on the agent (spool/rejected/), and `benchfarm resend` delivers
  them once the service takes them; the job is then done.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pipeline.agents.client import ServiceClient
from pipeline.agents.upload import DEFAULT_CHUNK_BYTES, chunks, deliver
from pipeline.config import Settings
from tests.helpers.cli_zygote import benchfarm_argv
from tests.helpers.farm import TOKEN, Farm, wait_for
from tests.helpers.full_suite import SAMPLES_PER_CASE, SUITE_CASES, paired_document, start_paired_job
from tests.helpers.suite_repo import GemmCase, gemm_suite_files, make_suite_repo
from tests.helpers.stores import database_url  # noqa: F401 - the SQLite and PostgreSQL stores

pytestmark = pytest.mark.e2e


def test_a_full_suite_paired_document_uploads_with_default_settings(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    # SQLite: the service's own file under its home (the farm reads it there)
    farm = Farm(root=tmp_path, suite=tmp_path, database_url="" if database_url.startswith("sqlite") else database_url)
    farm.service()   # default max_upload_bytes: nothing raised
    try:
        run_id, job_id = start_paired_job(farm, "gpu-agent")
        document = paired_document(run_id, job_id)
        sizes = [len(chunk) for chunk in chunks(document)]
        assert sum(sizes) > Settings().max_upload_bytes, "the document must not fit one request of the default limit"
        assert max(sizes) <= DEFAULT_CHUNK_BYTES < Settings().max_upload_bytes

        started = time.monotonic()
        delivered = deliver(ServiceClient(farm.url, TOKEN, timeout_s=300), document)
        seconds = time.monotonic() - started
        print(f"{delivered.samples} samples in {delivered.chunks} requests ({sum(sizes) / 2**20:.1f} MiB): "
              f"{seconds:.1f} s")
        total = SUITE_CASES * SAMPLES_PER_CASE
        assert total >= 2_500_000
        assert (delivered.stored, delivered.duplicates, delivered.samples) == (SUITE_CASES, 0, total)
        assert farm.api("GET", f"jobs/{job_id}")["status"] == "running"   # completing is the agent's next step
        farm.api("POST", f"jobs/{job_id}/complete", json={"agent": "gpu-agent"})
        assert farm.api("GET", f"jobs/{job_id}")["status"] == "done"

        (stored, n), = farm.query("SELECT SUM(length(m.samples)) / 8, SUM(m.n) FROM measurements m "
                                  "JOIN case_results r ON r.id = m.case_result_id WHERE r.job_id = ?", job_id)
        (paired, clocks), = farm.query("SELECT SUM(length(r.paired_samples)) / 8, SUM(length(m.sample_clocks)) / 8 "
                                       "FROM case_results r JOIN measurements m ON m.case_result_id = r.id "
                                       "WHERE r.job_id = ?", job_id)
        assert (int(stored), int(n), int(paired), int(clocks)) == (total, total, total, total)
        again = deliver(ServiceClient(farm.url, TOKEN, timeout_s=300), document)   # idempotent, chunk by chunk
        assert (again.stored, again.duplicates, again.samples) == (0, SUITE_CASES, 0)
    except Exception as exc:
        raise AssertionError(f"{exc}\n{farm.logs()}") from exc
    finally:
        farm.stop()


CPU_CASES = [GemmCase("alpha", 32, 32, 32), GemmCase("beta", 16, 32, 64)]


def test_a_refused_upload_stays_on_the_agent_and_resend_delivers_it(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, gemm_suite_files(CPU_CASES), name="suite-repo")
    farm = Farm(root=tmp_path, suite=repo / "kernels")
    try:
        service = farm.service({"BENCHFARM_MAX_UPLOAD_BYTES": "1024"})   # every result chunk is over it
        farm.register_device_class()
        (job_id,) = farm.trigger()["jobs"].values()
        farm.agent("agent-a", {"BENCHFARM_AGENT__UPLOAD_CHUNK_BYTES": str(64 * 1024)})
        job = wait_for(lambda: (j := farm.job(job_id))["status"] in ("done", "failed") and j, 90, "the job to end")
        assert job["status"] == "failed" and "over 1024 bytes" in job["error"], job
        assert "benchfarm resend" in job["error"], job
        kept = farm.spool("agent-a") / "rejected" / f"{job_id}.json"
        assert kept.is_file()
        assert farm.query("SELECT COUNT(*) FROM case_results WHERE job_id = ?", job_id) == [(0,)]
        refused = [e for e in farm.events("agent-a") if e["event"] == "results_refused"]
        assert len(refused) == 1 and refused[0]["kept"] == str(kept)
        assert refused[0]["resend"].startswith(f"benchfarm resend {kept} --server {farm.url} --token")
        measured = json.loads(kept.read_text())["document"]["results"]
        assert len(measured) == len(CPU_CASES) and all(r["status"] == "ok" for r in measured)

        service.kill(signal.SIGTERM)   # the operator raises the limit back to its default
        farm.service()
        resend = subprocess.run([*benchfarm_argv(), "resend", str(kept), "--server", farm.url,
                                 "--token", TOKEN], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                                env={**farm_env(tmp_path)})
        assert resend.returncode == 0, resend.stdout + resend.stderr
        assert f"job {job_id}: {len(CPU_CASES)} results stored" in resend.stdout and "job done" in resend.stdout
        job = farm.job(job_id)
        assert job["status"] == "done", job
        rows = farm.query("SELECT m.n, length(m.samples) / 8 FROM case_results r JOIN measurements m "
                          "ON m.case_result_id = r.id WHERE r.job_id = ?", job_id)
        ns = sorted(r["stats"]["n"] for r in measured)
        assert sorted(n for n, _ in rows) == ns and all(n == count for n, count in rows)
        again = subprocess.run([*benchfarm_argv(), "resend", str(kept), "--server", farm.url,
                                "--token", TOKEN], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                               env={**farm_env(tmp_path)})
        assert again.returncode == 0 and f"0 results stored, {len(CPU_CASES)} already there" in again.stdout, again
    except Exception as exc:
        raise AssertionError(f"{exc}\n{farm.logs()}") from exc
    finally:
        farm.stop()


def farm_env(root: Path) -> dict[str, str]:
    from tests.helpers.farm import base_env

    return base_env(root / "operator")
