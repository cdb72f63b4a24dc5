"""The foreign-format parsers and the mapping, on the shipped files (no store needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from pipeline.contracts import ContractError
from pipeline.results.store import formats
from pipeline.results.store.formats import CaseRule, FormatMapping

from tests.helpers import factories as f

DATA = Path(__file__).parents[2] / "data"


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def mapping(*rules: dict[str, Any], **fields: Any) -> FormatMapping:
    return FormatMapping(repository=f.REPO, commit=f.sha(1), device_class=f.DEVICE_CLASS,
                         rules=[CaseRule(target=f.TARGET, **r) for r in rules], **fields)


def test_pytest_benchmark_raw_data_are_the_samples() -> None:
    parsed = formats.parse("pytest-benchmark", load("pytest_benchmark.json"))
    raw = {b["fullname"]: b["stats"]["data"] for b in load("pytest_benchmark.json")["benchmarks"]}
    assert [b.name for b in parsed.benchmarks] == list(raw)
    for benchmark in parsed.benchmarks:
        assert benchmark.samples == raw[benchmark.name]
        assert len(benchmark.samples) == 10


def test_pytest_benchmark_without_data_gives_the_median_alone() -> None:
    parsed = formats.parse("pytest-benchmark", load("pytest_benchmark_stats_only.json"))
    medians = [b["stats"]["median"] for b in load("pytest_benchmark_stats_only.json")["benchmarks"]]
    assert [b.samples for b in parsed.benchmarks] == [[m] for m in medians]
    assert "median" in parsed.benchmarks[0].environment["pytest_benchmark.sample"]


def test_real_nvbench_states_give_their_mean_gpu_time() -> None:
    """NVBench's own output (cuda-bench 0.3.0 on an H200, see data/README.md): each state's mean
    cold GPU time is its one sample; noise, sample count, min and max ride along."""
    raw = load("nvbench_real.json")
    parsed = formats.parse("nvbench", raw)
    assert [b.name for b in parsed.benchmarks] == ["triton_gemm_bf16[Device=0 Shape=256x256x256]",
                                                    "torch_matmul_bf16[Device=0 Shape=256x256x256]"]
    for benchmark, bench in zip(parsed.benchmarks, raw["benchmarks"], strict=True):
        (state,) = bench["states"]
        summary = {s["tag"]: s["data"][0]["value"] for s in state["summaries"] if s.get("data")}
        assert benchmark.samples == [float(summary["nv/cold/time/gpu/mean"])]
        assert 1e-6 < benchmark.samples[0] < 1e-4  # a 256^3 bf16 GEMM: microseconds
        assert benchmark.environment["nvbench.noise"] == summary["nv/cold/time/gpu/stdev/relative"]
        assert benchmark.environment["nvbench.sample_size"] == summary["nv/cold/sample_size"]
        assert benchmark.environment["nvbench.gpu_min_s"] == summary["nv/cold/time/gpu/min"]
        assert benchmark.environment["nvbench.device"] == "NVIDIA H200"
        assert not benchmark.skipped and benchmark.error is None
    assert parsed.device_name == "NVIDIA H200"
    assert parsed.environment == {"nvbench.version": "0.1.0", "nvbench.git_version": "python-0.3.0"}


def test_real_nvbench_file_maps_onto_cases() -> None:
    m = mapping({"pattern": r"(?P<impl>triton)_gemm_bf16\[Device=0 Shape=(?P<s>\d+)x.*", "match": "regex",
                 "case": "gemm/square-{s}/{s}x{s}x{s}/bf16/{impl}"},
                {"pattern": "torch_matmul_bf16[[]*", "case": f.CONV})
    document, cases = formats.to_document(formats.parse("nvbench", load("nvbench_real.json")), m, run_id="r", job_id="j")
    assert cases == {"triton_gemm_bf16[Device=0 Shape=256x256x256]": "gemm/square-256/256x256x256/bf16/triton",
                     "torch_matmul_bf16[Device=0 Shape=256x256x256]": f.CONV}
    assert [r.status for r in document.results] == ["ok", "ok"]


def test_nvbench_skipped_states_are_skipped() -> None:
    # Hand-written (data/README.md): the real file has no skipped state.
    parsed = formats.parse("nvbench", load("nvbench.json"))
    ran, skipped = parsed.benchmarks
    assert ran.name == "gemm_f32[Device=0 M=256]"
    assert ran.samples == [1.2534e-05]
    assert skipped.name == "gemm_f32[Device=0 M=8192]" and skipped.skipped and not skipped.samples


def test_google_benchmark_aggregates_alone_are_refused() -> None:
    data = {"context": {"json_schema_version": 1}, "benchmarks": [
        {"name": "BM_x_mean", "run_name": "BM_x", "run_type": "aggregate", "aggregate_name": "mean",
         "real_time": 1.0, "time_unit": "ms"}]}
    with pytest.raises(ContractError, match="aggregates only"):
        formats.parse("google-benchmark", data)


def test_google_benchmark_errors_are_error_results() -> None:
    data = {"benchmarks": [{"name": "BM_x", "run_type": "iteration", "error_occurred": True,
                            "error_message": "out of memory", "real_time": 0, "time_unit": "ns"}]}
    (benchmark,) = formats.parse("google-benchmark", data).benchmarks
    document, _ = formats.to_document(formats.parse("google-benchmark", data),
                                      mapping({"pattern": "BM_x", "match": "exact", "case": f.GEMM}), run_id="r", job_id="j")
    assert benchmark.error == "out of memory"
    assert document.results[0].status == "error" and document.results[0].reason == "out of memory"


@pytest.mark.parametrize(("value", "named"), [
    ("slow", "must be a number"), (float("nan"), "NaN"), (float("inf"), "infinite"), (-1.0, "must be positive"),
    (0, "must be positive"), (True, "must be a number"),
])
def test_bad_times_are_refused_naming_the_field(value: Any, named: str) -> None:
    data = {"benchmarks": [{"name": "BM_x", "run_type": "iteration", "real_time": 1.0, "time_unit": "us"},
                           {"name": "BM_x", "run_type": "iteration", "real_time": value, "time_unit": "us"}]}
    with pytest.raises(ContractError) as error:
        formats.parse("google-benchmark", data)
    assert error.value.errors[0][0] == "data.benchmarks.1.real_time"
    assert named in error.value.errors[0][1]


def test_rules_map_names_to_cases_first_match_wins() -> None:
    m = mapping({"pattern": r"gemm_f32\[Device=0 M=(?P<m>\d+)\]", "match": "regex",
                 "case": "gemm/square-{m}/{m}x{m}x{m}/f32/iree"},
                {"pattern": "*", "case": f.CONV})
    document, cases = formats.to_document(formats.parse("nvbench", load("nvbench.json")), m, run_id="r", job_id="j")
    assert cases == {"gemm_f32[Device=0 M=256]": f.GEMM,
                     "gemm_f32[Device=0 M=8192]": "gemm/square-8192/8192x8192x8192/f32/iree"}
    assert [r.status for r in document.results] == ["ok", "skipped"]


def test_unmapped_names_are_named_or_ignored() -> None:
    parsed = formats.parse("pytest-benchmark", load("pytest_benchmark.json"))
    rule = {"pattern": "test_tiny.py::test_sorted", "match": "exact", "case": f.GEMM}
    with pytest.raises(ContractError) as error:
        formats.to_document(parsed, mapping(rule), run_id="r", job_id="j")
    assert [e[1] for e in error.value.errors] == [
        "no mapping rule matches benchmark 'test_tiny.py::test_sum[64]'",
        "no mapping rule matches benchmark 'test_tiny.py::test_sum[256]'"]
    document, _ = formats.to_document(parsed, mapping(rule, unmapped="ignore"), run_id="r", job_id="j")
    assert [r.case for r in document.results] == [f.GEMM]


def test_two_names_onto_one_case_are_refused() -> None:
    parsed = formats.parse("pytest-benchmark", load("pytest_benchmark.json"))
    with pytest.raises(ContractError, match="as 'test_tiny.py::test_sum\\[64\\]' does already"):
        formats.to_document(parsed, mapping({"pattern": "*", "case": f.GEMM}), run_id="r", job_id="j")


@pytest.mark.parametrize(("rule", "named"), [
    ({"pattern": "(", "match": "regex", "case": f.GEMM}, "not a regular expression"),
    ({"pattern": "x", "match": "regex", "case": "gemm/{m}/1/f32/x"}, "no named group"),
    ({"pattern": "x", "case": "not-a-case"}, "is not a case id"),
    ({"pattern": "x", "case": "gemm/{m}/1/f32/x"}, "need a regex rule"),
])
def test_bad_rules_are_refused(rule: dict[str, Any], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        mapping(rule)


def test_unknown_schema_versions_are_refused() -> None:
    with pytest.raises(ContractError, match="unknown schema version 2"):
        formats.parse("google-benchmark", {"context": {"json_schema_version": 2}, "benchmarks": []})
    nv = load("nvbench_real.json")
    nv["meta"]["version"]["json"]["major"] = 2
    with pytest.raises(ContractError, match="unknown schema version 2"):
        formats.parse("nvbench", nv)


def test_a_boolean_is_not_a_schema_version() -> None:
    with pytest.raises(ContractError, match="unknown schema version True") as gb:
        formats.parse("google-benchmark", {"context": {"json_schema_version": True}, "benchmarks": []})
    assert gb.value.errors[0][0] == "data.context.json_schema_version"
    nv = load("nvbench_real.json")
    nv["meta"]["version"]["json"]["major"] = True
    with pytest.raises(ContractError, match="unknown schema version True") as refused:
        formats.parse("nvbench", nv)
    assert refused.value.errors[0][0] == "data.meta.version.json.major"


@pytest.mark.parametrize(("format", "path", "longest"), [
    ("google-benchmark", "context.host_name", 64), ("nvbench", "devices.0.name", 200),
    ("pytest-benchmark", "machine_info.node", 64), ("pytest-benchmark", "machine_info.cpu.brand_raw", 200),
])
def test_host_and_device_names_are_bounded_where_the_file_is_read(format: str, path: str, longest: int) -> None:
    data = {"google-benchmark": {"context": {}, "benchmarks": [
                {"name": "BM_x", "run_type": "iteration", "real_time": 1.0, "time_unit": "us"}]},
            "nvbench": load("nvbench_real.json"), "pytest-benchmark": load("pytest_benchmark.json")}[format]
    *parents, last = path.split(".")
    where = data
    for part in parents:
        where = where[int(part)] if isinstance(where, list) else where[part]
    where[last] = "n" * longest
    parsed = formats.parse(format, data)
    rule = {"pattern": parsed.benchmarks[0].name, "match": "exact", "case": f.GEMM}
    document, _ = formats.to_document(parsed, mapping(rule, unmapped="ignore"), run_id="r", job_id="j")
    assert "n" * longest in (document.device.host, document.device.name)   # at the bound: taken
    where[last] = "n" * (longest + 1)
    with pytest.raises(ContractError) as refused:
        formats.parse(format, data)
    assert [field for field, _ in refused.value.errors] == [f"data.{path}"]
