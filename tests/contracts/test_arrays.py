"""Packed arrays (`contracts.arrays`): the wire form of samples and readings, and the store's blobs."""

from __future__ import annotations

import base64
import math
import zlib

import pytest

from pipeline.contracts import ContractError, CaseResult, parse_result
from pipeline.contracts.arrays import PackedArray, from_blob, pack, to_blob, unpack
from tests.helpers import factories as f

SAMPLES = [1e-3, 1.1e-3, 0.9e-3, 1.05e-3]


def test_pack_and_blob_keep_every_value_exactly() -> None:
    assert unpack(pack(SAMPLES)) == SAMPLES
    assert from_blob(to_blob(SAMPLES)) == SAMPLES and len(to_blob(SAMPLES)) == 8 * len(SAMPLES)
    assert unpack(pack(SAMPLES, dtype="f32")) == pytest.approx(SAMPLES, rel=1e-7)
    assert from_blob(None) == []


def _document(**result: object) -> dict[str, object]:
    doc = f.result_document(run_id="r", job_id="j", commit_sha=f.sha(1),
                            results=[f.ok(f.GEMM, SAMPLES, clocks=[1980.0] * 4)]).model_dump(mode="json")
    doc["results"][0].update(result)  # type: ignore[index]
    return doc


def test_a_document_travels_packed_and_a_plain_list_is_still_accepted() -> None:
    packed = _document()
    assert packed["results"][0]["samples"]["encoding"] == "zlib+base64"  # type: ignore[index]
    assert parse_result(packed).results[0].samples == SAMPLES
    plain = _document(samples=SAMPLES, sample_clocks_mhz=[1980.0] * 4)
    assert parse_result(plain).results[0].sample_clocks_mhz == [1980.0] * 4


@pytest.mark.parametrize(("packed", "field", "reason"), [
    (pack([1e-3, math.nan, 1e-3, 1e-3]).model_dump(), "results.0.samples.1", "finite"),
    (pack([1e-3, -1e-3, 1e-3, 1e-3]).model_dump(), "results.0.samples.1", "greater than 0"),
    (pack(SAMPLES).model_dump() | {"count": 5}, "results.0.samples", "does not hold 5 f64 numbers"),
    (pack(SAMPLES).model_dump() | {"data": "not base64!"}, "results.0.samples", "not base64"),
    (pack(SAMPLES).model_dump() | {"encoding": "lz4"}, "results.0.samples.encoding", "zlib+base64"),
    # schemathesis found it: zlib's max_length is a C ssize_t, so this count was an OverflowError (a 500)
    (pack(SAMPLES).model_dump() | {"count": 2**62}, "results.0.samples", "more f64 numbers than any document"),
])
def test_a_bad_packed_array_is_refused_naming_the_field(packed: dict[str, object], field: str, reason: str) -> None:
    with pytest.raises(ContractError) as err:
        parse_result(_document(samples=packed))
    assert any(e[0] == field and reason in e[1] for e in err.value.errors), err.value.errors


def test_a_small_body_cannot_inflate_past_its_count() -> None:
    bomb = base64.b64encode(zlib.compress(b"\0" * 80_000_000)).decode()
    with pytest.raises(ValueError, match="does not hold 4 f64 numbers"):
        unpack(PackedArray(dtype="f64", encoding="zlib+base64", count=4, data=bomb))


def test_stats_check_counts_unpacked_samples() -> None:
    result = f.ok(f.GEMM, SAMPLES).model_dump(mode="json")
    result["samples"] = pack(SAMPLES[:3]).model_dump()
    with pytest.raises(ValueError, match="stats.n is 4 but there are 3 samples"):
        CaseResult.model_validate(result)
