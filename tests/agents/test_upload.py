"""Chunked delivery (`agents.upload.chunks`): each chunk a valid result document, in order, under the budget."""

from __future__ import annotations

import json

from pipeline.agents.upload import chunks
from pipeline.contracts import parse_result
from tests.helpers import factories as f


def test_chunks_split_by_case_under_the_budget_and_keep_every_result_once() -> None:
    results = [f.ok(f"gemm/c{i}/8x8x8/f32/iree", f.series_samples(1e-3, n=2000)) for i in range(12)]
    document = f.result_document(run_id="r", job_id="j", commit_sha=f.sha(1), results=results).model_dump(mode="json")
    one = len(json.dumps(document["results"][0]))
    parts = list(chunks(document, budget_bytes=3 * one + 1024))
    assert len(parts) == 4 and all(len(p) <= 3 * one + 1024 for p in parts)
    parsed = [parse_result(p) for p in parts]
    assert [r.case for d in parsed for r in d.results] == [r.case for r in results]
    assert all(d.job_id == "j" and d.device == parsed[0].device for d in parsed)


def test_a_result_larger_than_the_budget_goes_alone() -> None:
    results = [f.ok(f"gemm/c{i}/8x8x8/f32/iree", f.series_samples(1e-3, n=500)) for i in range(3)]
    document = f.result_document(run_id="r", job_id="j", commit_sha=f.sha(1), results=results).model_dump(mode="json")
    assert [len(parse_result(p).results) for p in chunks(document, budget_bytes=100)] == [1, 1, 1]
