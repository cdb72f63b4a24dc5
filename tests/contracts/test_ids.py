"""The case id: one parser and one formatter over every case of the default suite, malformed ids
refused with what is wrong, the lenient read of stored text, and the text form in API models."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from pipeline.build.suite_loader import load_suite
from pipeline.contracts.ids import CASE_ID_PATTERN, CaseId, CaseIdAsText

ROOT = Path(__file__).resolve().parents[2]
GEMM = "gemm/llama3-8b-mlp-up/4096x14336x4096/bf16/triton"


def test_every_case_of_the_default_suite_round_trips() -> None:
    cases = load_suite(ROOT / "kernels")
    assert len(cases) > 100, "the default suite's cases"
    for case in cases:
        text = str(case.case_id)
        parsed = CaseId.parse(text)
        assert parsed == case.case_id, text
        assert str(parsed) == text
        assert parsed.without_family == text.removeprefix(case.case_id.family + "/")


def test_parse_validates_as_the_model_does() -> None:
    parsed = CaseId.parse(GEMM)
    built = CaseId(family="gemm", name="llama3-8b-mlp-up", shape="4096x14336x4096", dtype="bf16", impl="triton")
    assert parsed == built and hash(parsed) == hash(built)
    assert (parsed.family, parsed.name, parsed.shape, parsed.dtype, parsed.impl) == \
        ("gemm", "llama3-8b-mlp-up", "4096x14336x4096", "bf16", "triton")
    assert CaseId.parse(GEMM) is parsed, "parses are cached (the instance is frozen: sharing it is safe)"
    assert str(parsed) == GEMM
    vendor = GEMM.replace("/triton", "/vendor")
    for deep in (False, True):   # a copy with other parts has its own text, and leaves the cached one alone
        copied = parsed.model_copy(update={"impl": "vendor"}, deep=deep)
        assert copied == CaseId.parse(vendor) and str(copied) == vendor
    assert str(CaseId.parse(GEMM)) == GEMM and CaseId.parse(GEMM).impl == "triton"


@pytest.mark.parametrize(("text", "problem"), [
    ("gemm/x", "must have 5 parts family/name/shape/dtype/impl separated by '/', not 2"),
    ("gemm/a/b/c/d/e", "must have 5 parts family/name/shape/dtype/impl separated by '/', not 6"),
    ("", "must have 5 parts"),
    ("gemm//1x1/f32/iree", "its name is empty"),
    ("gemm/a/1x1/f32/", "its impl is empty"),
    ("gemm/a b/1x1/f32/iree", "its name 'a b' holds ' '; only letters, digits and . _ + - are allowed"),
    ("gemm/a<img>/1x1/f32/iree", "its name 'a<img>' holds '<>'"),
    ("gemm/-a/1x1/f32/iree", "its name '-a' must begin with a letter or a digit"),
    ("gemm/a/1x1/" + "f" * 33 + "/iree", "its dtype is 33 characters long, more than 32"),
    ("gemm/é/1x1/f32/iree", "its name 'é' must begin with a letter or a digit"),
    ("/".join(["g" * 100, "n" * 200, "s" * 110, "f32", "iree"]), "is 421 characters long, more than 400"),
])
def test_malformed_ids_are_refused_naming_the_problem(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match="case id") as caught:
        CaseId.parse(text)
    assert problem in str(caught.value)


def test_the_pattern_and_the_parser_agree() -> None:
    for text in (GEMM, "gemm/x", "gemm/a b/1x1/f32/iree", "a/b/c/d/e"):
        matches = re.match(CASE_ID_PATTERN, text) is not None
        try:
            CaseId.parse(text)
            parsed = True
        except ValueError:
            parsed = False
        assert matches == parsed, text


def test_stored_text_that_does_not_validate_is_read_leniently() -> None:
    evil = 'gemm/<img src=x onerror="alert(1)">/1x1x1/f32/triton'
    with pytest.raises(ValueError, match="its name"):
        CaseId.parse(evil)
    read = CaseId.parse(evil, lenient=True)
    assert read.name == '<img src=x onerror="alert(1)">' and str(read) == evil
    assert CaseId.parse(GEMM, lenient=True) is CaseId.parse(GEMM), "valid text reads as the validated id"
    with pytest.raises(ValueError, match="must have 5 parts"):   # the one thing a lenient read checks
        CaseId.parse("gemm/x", lenient=True)


class _Out(BaseModel):
    case_id: CaseIdAsText
    control_case: CaseIdAsText | None = None


class _PlainOut(BaseModel):
    case_id: str
    control_case: str | None = None


def test_models_carry_a_case_id_as_its_text() -> None:
    case = CaseId.parse(GEMM)
    out = _Out(case_id=case)
    assert out.case_id is case
    assert _Out.model_validate({"case_id": GEMM}).case_id is case
    assert out.model_dump() == {"case_id": GEMM, "control_case": None}
    assert out.model_dump_json() == _PlainOut(case_id=GEMM).model_dump_json()
    for mode in ("validation", "serialization"):   # the API's JSON Schema stays that of a str field
        assert _Out.model_json_schema(mode=mode)["properties"] == _PlainOut.model_json_schema(mode=mode)["properties"]
    with pytest.raises(ValidationError, match="must have 5 parts"):
        _Out(case_id="gemm/x")
    with pytest.raises(ValidationError, match="a case id is a CaseId or its text, not int"):
        _Out(case_id=3)
