"""The contracts reject bad documents with the field and the reason, and the committed schemas are current."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from typing import Any

import pytest

from pipeline.contracts import (
    SCHEMA_DIR,
    SCHEMA_MODELS,
    CaseId,
    ContractError,
    Target,
    parse_manifest,
    parse_result,
    schema_of,
)

SHA = "a" * 40


def result_doc(**overrides: Any) -> dict[str, Any]:
    now = datetime(2026, 11, 21, tzinfo=timezone.utc).isoformat()
    case = {
        "case": "gemm/square-256/256x256x256/f32/iree",
        "target": "llvm-cpu:x86_64",
        "status": "ok",
        "samples": [1e-3, 1.1e-3, 0.9e-3],
        "stats": {"n": 3, "median": 1e-3, "mean": 1e-3, "stdev": 1e-4, "min": 0.9e-3, "max": 1.1e-3},
    }
    doc = {
        "schema_version": 1, "run_id": "r1", "job_id": "j1", "repository": "demo", "commit": SHA,
        "device": {"device_class": "cpu-x86_64", "uid": "host-1"},
        "agent": {"name": "local", "version": "0.1.0"},
        "started_at": now, "finished_at": now, "results": [case],
    }
    doc.update(overrides)
    return doc


def manifest_doc() -> dict[str, Any]:
    return {
        "schema_version": 1, "repository": "demo", "commit": SHA, "suite_path": "kernels",
        "suite_digest": "b" * 40, "created_at": "2026-11-21T00:00:00Z", "compilers": {"iree": "3.13.0"},
        "targets": ["llvm-cpu:x86_64"],
        "entries": [{
            "case": "gemm/square-256/256x256x256/f32/iree", "target": "llvm-cpu:x86_64", "status": "built",
            "artifact": {"path": "artifacts/x.vmfb", "sha256": "c" * 64, "size_bytes": 10},
            "launch": {"entry_point": "main", "arguments": ["a", "b"], "results": ["c"]},
            "tensors": [
                {"name": "a", "role": "input", "shape": [256, 256], "dtype": "f32"},
                {"name": "b", "role": "input", "shape": [256, 256], "dtype": "f32"},
                {"name": "c", "role": "output", "shape": [256, 256], "dtype": "f32"},
            ],
            "reference": {"module": "gemm.reference", "function": "matmul", "atol": 1e-3, "rtol": 1e-3},
            "flops": 2 * 256**3, "bytes": 3 * 4 * 256**2,
            "compile": {"compiler": "iree", "compiler_version": "3.13.0", "compile_time_s": 1.0, "binary_bytes": 10},
        }],
    }


def test_valid_documents_parse() -> None:
    assert parse_result(result_doc()).results[0].stats.median == 1e-3  # type: ignore[union-attr]
    assert parse_manifest(manifest_doc()).entries[0].status == "built"
    assert parse_result(json.dumps(result_doc())).job_id == "j1"


def _error_fields(exc: ContractError) -> list[str]:
    return [field for field, _ in exc.errors]


@pytest.mark.parametrize(
    ("mutate", "field", "reason_part"),
    [
        (lambda d: d["results"][0].__setitem__("samples", [1e-3, "fast", 1e-3]), "results.0.samples.1", "number"),
        (lambda d: d["results"][0].__setitem__("samples", [1e-3, math.nan, 1e-3]), "results.0.samples.1", "finite"),
        (lambda d: d["results"][0].__setitem__("samples", [1e-3, math.inf, 1e-3]), "results.0.samples.1", "finite"),
        (lambda d: d["results"][0].__setitem__("samples", [1e-3, -1e-3, 1e-3]), "results.0.samples.1", "greater than 0"),
        (lambda d: d.__setitem__("commit", "not-a-sha"), "commit", "pattern"),
        (lambda d: d.pop("device"), "device", "required"),
        (lambda d: d["results"][0].__setitem__("case", "gemm/only-three/parts"), "results.0.case", "pattern"),
        (lambda d: d["results"][0].__setitem__("status", "wrong"), "results.0", "needs a reason"),
        (lambda d: d.__setitem__("surprise", 1), "surprise", "Extra inputs"),
    ],
)
def test_invalid_result_names_the_field(mutate: Any, field: str, reason_part: str) -> None:
    doc = result_doc()
    mutate(doc)
    with pytest.raises(ContractError) as info:
        parse_result(doc)
    assert field in _error_fields(info.value), info.value.errors
    assert reason_part in str(info.value)


def test_unknown_schema_version_is_named() -> None:
    with pytest.raises(ContractError, match="schema_version: unknown schema version 7"):
        parse_result(result_doc(schema_version=7))


def test_invalid_manifest_names_the_field() -> None:
    doc = manifest_doc()
    doc["entries"][0]["artifact"]["sha256"] = "xyz"
    with pytest.raises(ContractError) as info:
        parse_manifest(doc)
    assert "entries.0.artifact.sha256" in _error_fields(info.value)

    doc = manifest_doc()
    doc["entries"][0]["launch"]["arguments"] = ["a", "missing"]
    with pytest.raises(ContractError, match="unknown tensors: missing"):
        parse_manifest(doc)

    doc = manifest_doc()
    doc["entries"][0]["artifact"]["path"] = "../../etc/passwd"
    with pytest.raises(ContractError, match="inside the bundle"):
        parse_manifest(doc)


def test_ids_round_trip() -> None:
    text = "gemm/llama3-8b-mlp-up/4096x14336x4096/bf16/triton"
    assert str(CaseId.parse(text)) == text
    assert str(Target.parse("cuda:sm_90")) == "cuda:sm_90"
    with pytest.raises(ValueError, match="5 parts"):
        CaseId.parse("gemm/x")
    with pytest.raises(ValueError):
        Target.parse("opencl:foo")


@pytest.mark.parametrize("name", sorted(SCHEMA_MODELS))
def test_committed_schema_is_current(name: str) -> None:
    committed = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
    assert committed == schema_of(name), f"run `benchfarm schemas --write`: {name} schema is stale"
    assert committed["properties"]["schema_version"]["const"] == 1


def test_code_evidence_is_a_listing_or_the_reason_there_is_none() -> None:
    classes = {c: 0 for c in ("mma", "global_load", "global_store", "shared_load", "shared_store", "async_copy",
                              "barrier", "branch", "other")}
    code = {"tool": "cuobjdump -sass", "digest": "b" * 64, "listing": f"code/{'b' * 64}.txt",
            "instructions": {"total": 3, "by_class": {**classes, "mma": 1, "other": 2}}}
    doc = manifest_doc()
    doc["entries"][0]["code"] = code
    entry = parse_manifest(doc).entries[0]
    assert entry.code is not None and entry.code_digest() is not None

    doc["entries"][0]["code"] = {**code, "instructions": {"total": 4, "by_class": {**classes, "mma": 1, "other": 2}}}
    with pytest.raises(ContractError, match="add up to the total"):
        parse_manifest(doc)
    doc["entries"][0]["code"] = {**code, "unavailable": "no disassembler"}
    with pytest.raises(ContractError, match="unavailable code evidence has no digest"):
        parse_manifest(doc)
    doc["entries"][0]["code"] = {"tool": "", "unavailable": "no disassembler for IREE vulkan executables"}
    assert parse_manifest(doc).entries[0].code_digest() is None
