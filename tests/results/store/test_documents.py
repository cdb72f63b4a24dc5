"""Bad documents never reach the store: the contracts refuse them and name the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from sqlalchemy import Engine

from pipeline.config import AnalysisSettings
from pipeline.contracts import ContractError, parse_manifest, parse_result
from pipeline.results.store import ingest
from pipeline.results.store.db import session_scope

from tests.helpers import factories as f


def _valid_result(engine: Engine) -> dict[str, Any]:
    with session_scope(engine) as s:
        run = ingest.create_run(s, repository=f.REPO, commit_sha=f.sha(1), kind="pr", device_classes=[f.DEVICE_CLASS])
        doc = f.result_document(run_id=run.id, job_id=run.jobs[0].id, commit_sha=f.sha(1),
                                results=[f.ok(f.GEMM, f.series_samples(1e-3, n=5))])
    return doc.model_dump(mode="json")


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is _DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return doc


_DELETE = object()


@pytest.mark.parametrize("path, value, named", [
    ("results.0.samples", "fast", "results.0.samples"),
    ("results.0.samples.2", float("nan"), "results.0.samples.2"),
    ("results.0.samples.3", float("inf"), "results.0.samples.3"),
    ("results.0.samples.1", -1e-3, "results.0.samples.1"),
    ("results.0.stats.median", 0.0, "results.0.stats.median"),
    ("schema_version", 2, "schema_version"),
    ("commit", _DELETE, "commit"),
    ("commit", "not-a-sha", "commit"),
    ("device.uid", "", "device.uid"),
])
def test_invalid_result_documents_are_refused_with_the_field(seeded: Engine, path: str, value: Any, named: str) -> None:
    valid = _valid_result(seeded)
    parse_result(valid)  # the starting point is valid: the failure below is the change's
    with pytest.raises(ContractError) as caught:
        parse_result(_set(valid, path, value))
    assert any(field == named for field, _ in caught.value.errors), caught.value.errors
    assert named in str(caught.value)


def test_a_parsed_raw_document_is_stored(seeded: Engine) -> None:
    with session_scope(seeded) as s:
        summary = ingest.ingest_result(s, document=parse_result(_valid_result(seeded)), analysis=AnalysisSettings())
        assert summary.samples == 5
        assert f.sample_count(s) == 5


@pytest.mark.parametrize("path, value, named", [
    ("entries.0.compile.compile_time_s", -1.0, "entries.0.compile.compile_time_s"),
    ("entries.0.compile.compile_time_s", float("nan"), "entries.0.compile.compile_time_s"),
    ("entries.0.case", "gemm/only-three/parts", "entries.0.case"),
    ("created_at", _DELETE, "created_at"),
    ("schema_version", 7, "schema_version"),
])
def test_invalid_manifests_are_refused_with_the_field(path: str, value: Any, named: str) -> None:
    valid = f.manifest(f.sha(1), [f.built_entry(f.GEMM)]).model_dump(mode="json")
    parse_manifest(valid)
    with pytest.raises(ContractError) as caught:
        parse_manifest(_set(valid, path, value))
    assert any(field == named for field, _ in caught.value.errors), caught.value.errors
