"""POST /import/{format} over real HTTP on both stores: files from the real tools, and refusals.

The Google Benchmark file comes from the real iree-benchmark-module, run here on a 64x64 matmul
compiled with iree-compile; the pytest-benchmark files are real (see data/README.md); one NVBench
file is real (cuda-bench 0.3.0 on an H200), the other hand-written to NVBench's format for a
skipped state."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from pipeline.service import auth
from pipeline.results.store import ingest
from pipeline.results.store.db import session_scope
from pipeline.results.store.models import Run

from tests.helpers import factories as f
from tests.helpers.http_client import post, snapshot
from .test_api_ingest import Service, _service, assert_refused

DATA = Path(__file__).parents[1] / "data"
BIN = Path(sys.executable).parent
MATMUL_64 = "gemm/square-64/64x64x64/f32/iree"
MATMUL_MLIR = """
func.func @matmul(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<64x64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<64x64xf32>) -> tensor<64x64xf32>
  %c = linalg.matmul ins(%a, %b : tensor<64x64xf32>, tensor<64x64xf32>) outs(%init : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %c : tensor<64x64xf32>
}
"""


@pytest.fixture(scope="module")
def google_benchmark_json(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What `iree-benchmark-module --benchmark_repetitions=5 --benchmark_format=json` writes for a 64x64 matmul."""
    work = tmp_path_factory.mktemp("iree")
    (work / "matmul.mlir").write_text(MATMUL_MLIR)
    subprocess.run([BIN / "iree-compile", work / "matmul.mlir", "--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
                    "-o", work / "matmul.vmfb"], check=True, capture_output=True, timeout=300)
    subprocess.run([BIN / "iree-benchmark-module", f"--module={work / 'matmul.vmfb'}", "--device=local-sync",
                    "--function=matmul", "--input=64x64xf32=1", "--input=64x64xf32=2", "--benchmark_repetitions=5",
                    "--benchmark_min_time=0.02s", "--benchmark_format=json", f"--benchmark_out={work / 'out.json'}",
                    "--benchmark_out_format=json"], check=True, capture_output=True, timeout=300)
    data: dict[str, Any] = json.loads((work / "out.json").read_text())
    return data


@pytest.fixture
def service(seeded: Engine, tmp_path: Any) -> Iterator[Service]:
    with session_scope(seeded) as s:  # the 64x64 matmul is a case of the suite at c1
        ingest.ingest_manifest(s, manifest=f.manifest(f.sha(1), [f.built_entry(MATMUL_64)]), path="/bundles/1")
    yield from _service(seeded, tmp_path, max_upload_bytes=1024 * 1024)


def mapping(*rules: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"repository": f.REPO, "commit": f.sha(1), "device_class": f.DEVICE_CLASS,
            "rules": [{"target": f.TARGET, **r} for r in rules], **fields}


GB_RULES = ({"pattern": "BM_matmul/*", "case": MATMUL_64},)
PYTEST_RULES = ({"pattern": r".*::test_sum\[(?P<n>\d+)\]", "match": "regex", "case": "conv/resnet-3x3/1x{n}x56x56/f32/iree"},
                {"pattern": "test_tiny.py::test_sorted", "match": "exact", "case": f.GEMM})
NV_RULES = ({"pattern": "gemm_f32?Device=0 M=256?", "case": f.GEMM},
            {"pattern": "gemm_f32?Device=0 M=8192?", "case": f.CONV})


def import_(service: Service, format: str, data: Any, body_mapping: dict[str, Any], token: str | None = None) -> Any:
    body = json.dumps({"mapping": body_mapping, "data": data})
    return post(service.url, f"/api/v1/import/{format}", body, token or service.tokens["agent"])


def test_iree_benchmark_module_output_is_stored_with_every_repetition(
    service: Service, google_benchmark_json: dict[str, Any]
) -> None:
    response = import_(service, "google-benchmark", google_benchmark_json, mapping(*GB_RULES))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["cases"] == {"BM_matmul/process_time/real_time": MATMUL_64}
    assert (body["stored"], body["samples"]) == (1, 5)
    unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    expected = sorted(b["real_time"] * unit[b["time_unit"]] for b in google_benchmark_json["benchmarks"]
                      if b["run_type"] == "iteration")
    with session_scope(service.engine) as s:
        assert sorted(f.stored_samples(s)) == pytest.approx(expected)
        run = s.get(Run, body["run_id"])
        assert run is not None, body
        assert run.status == "done" and run.kind == "adhoc"
    before = snapshot(service.engine)
    again = import_(service, "google-benchmark", google_benchmark_json, mapping(*GB_RULES))
    assert again.status_code == 200
    assert (again.json()["stored"], again.json()["duplicates"], again.json()["run_id"]) == (0, 1, body["run_id"])
    assert snapshot(service.engine) == before


def test_pytest_benchmark_and_nvbench_files_are_stored(service: Service) -> None:
    pb = import_(service, "pytest-benchmark", json.loads((DATA / "pytest_benchmark.json").read_text()),
                 mapping(*PYTEST_RULES, unmapped="ignore"))
    assert pb.status_code == 422  # test_sum[256] maps onto a case no manifest registered
    assert "unknown case conv/resnet-3x3/1x256x56x56/f32/iree" in pb.text
    rules = ({"pattern": "test_tiny.py::test_sum[[]64]", "case": f.CONV}, PYTEST_RULES[1])
    pb = import_(service, "pytest-benchmark", json.loads((DATA / "pytest_benchmark.json").read_text()),
                 mapping(*rules, unmapped="ignore"))
    assert pb.status_code == 200, pb.text
    assert (pb.json()["stored"], pb.json()["samples"]) == (2, 20)
    nv = import_(service, "nvbench", json.loads((DATA / "nvbench.json").read_text()),
                 mapping(*NV_RULES, commit=f.sha(2)))
    assert nv.status_code == 200, nv.text
    assert (nv.json()["stored"], nv.json()["samples"]) == (2, 1)  # one ok state (one sample), one skipped


def test_a_real_nvbench_file_is_stored(service: Service) -> None:
    real = json.loads((DATA / "nvbench_real.json").read_text())
    rules = ({"pattern": "triton_gemm_bf16[[]Device=0 Shape=256x256x256]", "case": f.GEMM},
             {"pattern": "torch_matmul_bf16[[]Device=0 Shape=256x256x256]", "case": f.CONV})
    nv = import_(service, "nvbench", real, mapping(*rules, commit=f.sha(3)))
    assert nv.status_code == 200, nv.text
    assert (nv.json()["stored"], nv.json()["samples"]) == (2, 2)  # two states, one sample (the mean) each
    means = sorted(float(next(s["data"][0]["value"] for s in b["states"][0]["summaries"]
                              if s["tag"] == "nv/cold/time/gpu/mean")) for b in real["benchmarks"])
    with session_scope(service.engine) as s:
        assert sorted(f.stored_samples(s)) == pytest.approx(means)


def test_an_existing_job_takes_the_import(service: Service, google_benchmark_json: dict[str, Any]) -> None:
    with session_scope(service.engine) as s:
        run = ingest.create_run(s, repository=f.REPO, commit_sha=f.sha(1), kind="nightly", device_classes=[f.DEVICE_CLASS])
        run_id, job_id = run.id, run.jobs[0].id
    response = import_(service, "google-benchmark", google_benchmark_json, mapping(*GB_RULES, job_id=job_id))
    assert response.status_code == 200, response.text
    assert (response.json()["run_id"], response.json()["job_id"]) == (run_id, job_id)


def test_an_import_naming_another_agents_job_is_refused(service: Service, google_benchmark_json: dict[str, Any]) -> None:
    """Object level (issue 18): mapping.job_id names a job leased to agent-1 (agent-token); another
    agent token's import into it is 403 and changes nothing, agent-1's own is stored."""
    from .test_api_ingest import new_job

    run_id, job_id = new_job(service.engine, 1)   # running, leased to agent-1
    with session_scope(service.engine) as s:
        other = auth.create_token(s, name="other-agent-token", scopes=["agent"])
    body = json.dumps({"mapping": mapping(*GB_RULES, job_id=job_id), "data": google_benchmark_json})
    before = snapshot(service.engine)
    assert_refused(post(service.url, "/api/v1/import/google-benchmark", body, other), 403,
                   "is leased to agent 'agent-1'")
    assert snapshot(service.engine) == before
    mine = post(service.url, "/api/v1/import/google-benchmark", body, service.tokens["agent"])
    assert mine.status_code == 200 and mine.json()["stored"] == 1, mine.text


def _gb(real_time: Any, **context: Any) -> dict[str, Any]:
    entry = {"name": "BM_matmul/process_time/real_time", "run_name": "BM_matmul/process_time/real_time",
             "run_type": "iteration", "repetitions": 2, "iterations": 10, "time_unit": "ms"}
    return {"context": {"json_schema_version": 1, **context},
            "benchmarks": [{**entry, "repetition_index": 0, "real_time": 0.5},
                           {**entry, "repetition_index": 1, "real_time": real_time}]}


@pytest.mark.parametrize(("data", "rules", "fields", "named"), [
    pytest.param(_gb("fast"), GB_RULES, {}, "data.benchmarks.1.real_time: must be a number", id="wrong-type"),
    pytest.param(_gb(float("nan")), GB_RULES, {}, "data.benchmarks.1.real_time: NaN is not a JSON number", id="nan"),
    pytest.param(_gb(float("inf")), GB_RULES, {}, "data.benchmarks.1.real_time: Infinity is not a JSON number", id="infinite"),
    pytest.param(_gb(-0.5), GB_RULES, {}, "data.benchmarks.1.real_time: is -0.5; a time must be positive", id="negative"),
    pytest.param(_gb(0.5, json_schema_version=2), GB_RULES, {}, "unknown schema version 2", id="schema-version"),
    pytest.param(_gb(0.5), ({"pattern": "BM_other*", "case": MATMUL_64},), {},
                 "no mapping rule matches benchmark 'BM_matmul/process_time/real_time'", id="unmapped"),
    pytest.param(_gb(0.5), ({"pattern": "BM_*", "case": "gemm/unknown/1x1x1/f32/iree"},), {},
                 "results.0.case: unknown case gemm/unknown/1x1x1/f32/iree", id="unknown-case"),
    pytest.param(_gb(0.5), GB_RULES, {"commit": "f" * 40}, "mapping.commit: commit ffff", id="unknown-commit"),
    pytest.param(_gb(0.5), GB_RULES, {"device_class": "no-such-class"}, "mapping.device_class: unknown device class",
                 id="unknown-device-class"),
    pytest.param(_gb(0.5), GB_RULES, {"job_id": "nope"}, "mapping.job_id: unknown job nope", id="unknown-job"),
    pytest.param(_gb(0.5), ({"pattern": "(", "match": "regex", "case": MATMUL_64},), {},
                 "not a regular expression", id="bad-rule"),
    pytest.param([1, 2], GB_RULES, {}, "data: must be a JSON object", id="not-an-object"),
])
def test_a_malformed_import_is_refused_and_changes_nothing(
    service: Service, data: Any, rules: tuple[dict[str, Any], ...], fields: dict[str, Any], named: str
) -> None:
    before = snapshot(service.engine)
    response = import_(service, "google-benchmark", data, mapping(*rules, **fields))
    assert_refused(response, 422, named)
    assert snapshot(service.engine) == before


@pytest.mark.parametrize(("body", "named"), [
    ('{"data": {}}', "mapping"),
    ("not json", "not JSON"),
])
def test_a_malformed_envelope_is_refused(service: Service, body: str, named: str) -> None:
    before = snapshot(service.engine)
    assert_refused(post(service.url, "/api/v1/import/nvbench", body, service.tokens["agent"]), 422, named)
    assert_refused(post(service.url, "/api/v1/import/csv", "{}", service.tokens["agent"]), 422, "format")
    assert snapshot(service.engine) == before


def test_an_import_needs_the_agent_scope(service: Service) -> None:
    before = snapshot(service.engine)
    nv = json.loads((DATA / "nvbench.json").read_text())
    assert_refused(import_(service, "nvbench", nv, mapping(*NV_RULES), token=service.tokens["user"]), 403,
                   "lacks the agent scope")
    with session_scope(service.engine) as s:
        auth.revoke_token(s, name="agent-token")
    before = snapshot(service.engine)
    assert_refused(import_(service, "nvbench", nv, mapping(*NV_RULES)), 401, "revoked")
    assert snapshot(service.engine) == before


def _nvbench_with_sample_times(times: Any, name: str) -> tuple[dict[str, Any], dict[str, str]]:
    """tests/data/nvbench.json with its first state's sample times in a side file, as
    NVBench's --jsonbin writes them (a `nv/json/bin:nv/cold/sample_times` summary naming the file)."""
    import base64

    import numpy as np

    data = json.loads((DATA / "nvbench.json").read_text())
    state = data["benchmarks"][0]["states"][0]
    raw = np.asarray(times, dtype="<f4")
    state["summaries"].append({"tag": "nv/json/bin:nv/cold/sample_times", "name": "Samples Times File",
                               "hint": "file/sample_times", "data": [
                                   {"name": "filename", "type": "string", "value": name},
                                   {"name": "size", "type": "int64", "value": str(raw.size)}]})
    return data, {name: base64.b64encode(raw.tobytes()).decode()}


def test_two_nvbench_runs_with_sample_times_compare_with_a_verdict(service: Service) -> None:
    """Issue 18: an NVBench state's sample times (the --jsonbin side file) are its samples, so two
    imports of different runs of one kernel are judged like two runs: a 30 % slower run is
    regressed, where the mean alone gave insufficient data."""
    import numpy as np

    from pipeline.config import CompareSettings
    from pipeline.results.store.compare import compare

    rng = np.random.default_rng(3)
    rules = (NV_RULES[0],)
    for commit, scale in ((2, 1.0), (3, 1.3)):
        times = 1e-3 * scale * np.exp(rng.normal(0, 0.01, 400))
        data, files = _nvbench_with_sample_times(times, f"gemm.json-bin/{commit}.bin")
        body = json.dumps({"mapping": mapping(*rules, commit=f.sha(commit), unmapped="ignore"), "data": data,
                           "files": files})
        answer = post(service.url, "/api/v1/import/nvbench", body, service.tokens["agent"])
        assert answer.status_code == 200, answer.text
        assert answer.json()["samples"] == 400
    with session_scope(service.engine) as s:
        comparison = compare(s, repository=f.REPO, head_sha=f.sha(3), device_class=f.DEVICE_CLASS,
                             settings=CompareSettings(), base_sha=f.sha(2))
    (row,) = [r for r in comparison.rows if str(r.case_id) == f.GEMM]
    assert row.status == "regressed" and row.change == pytest.approx(0.3, abs=0.03), row


def test_a_side_file_of_the_wrong_size_is_refused(service: Service) -> None:
    data, files = _nvbench_with_sample_times([1e-3] * 10, "x.bin")
    data["benchmarks"][0]["states"][0]["summaries"][-1]["data"][1]["value"] = "11"
    body = json.dumps({"mapping": mapping(NV_RULES[0], commit=f.sha(2), unmapped="ignore"), "data": data,
                       "files": files})
    before = snapshot(service.engine)
    assert_refused(post(service.url, "/api/v1/import/nvbench", body, service.tokens["agent"]), 422,
                   "x.bin: 40 bytes, not 11 float32 sample times")
    assert snapshot(service.engine) == before
