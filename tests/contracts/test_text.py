"""The one rule for stored text (`pipeline.contracts.text`) and the strict reader that applies it to
every body (`pipeline.contracts.strict_json`): any key or value at any depth, named by its path."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from pipeline.contracts import strict_json
from pipeline.contracts.text import Environment, find_bad_text, text_problem


def test_text_that_may_be_stored() -> None:
    for text in ("", "plain", "Grüße, 東京 ✓", "\U0001f680 rocket", "tab\tnew\nline"):
        assert text_problem(text) is None, text
    assert "NUL" in (text_problem("a\x00b") or "")
    assert "surrogate (U+D800) at character 1" in (text_problem("a\ud800") or "")
    assert "surrogate (U+DFFF)" in (text_problem("\udfff") or "")


@pytest.mark.parametrize(("data", "where"), [
    ("a\x00", "(document)"),
    (["ok", "a\x00b"], "1"),
    ({"devices": ["host-1", "a\x00b"]}, "devices.1"),
    ({"results": [{"environment": {"k": "\ud800"}}]}, "results.0.environment.k"),
    ({"environment": {"k\ud800": "v"}}, "environment.k\\ud800"),
    ({"a": {"b\x00": 1}}, "a.b\\x00"),
])
def test_a_bad_string_is_found_anywhere_and_named(data: Any, where: str) -> None:
    found = find_bad_text(data)
    assert found is not None and found[0] == where
    found[0].encode("utf-8")   # the path itself can be sent back


def test_good_data_passes() -> None:
    assert find_bad_text({"a": [1, 2.5, None, True, {"b": ["c", "Grüße"]}], "d": "e"}) is None


@pytest.mark.parametrize(("body", "field", "reason"), [
    (b'{"devices": ["a\\u0000b"]}', "devices.0", "NUL"),
    (b'{"environment": {"k": "\\ud800"}}', "environment.k", "surrogate"),
    (b'["\\udfff"]', "0", "surrogate"),
    (b'{"k\\u0000": 1}', "k\\x00", "NUL"),
])
def test_strict_json_refuses_text_that_may_not_be_stored(body: bytes, field: str, reason: str) -> None:
    with pytest.raises(strict_json.BodyError, match=reason) as refused:
        strict_json.loads(body)
    assert refused.value.field == field


def test_a_str_with_a_lone_surrogate_is_refused_as_not_utf8() -> None:
    with pytest.raises(strict_json.BodyError, match="not UTF-8"):
        strict_json.loads('{"a": "\ud800"}')
    assert strict_json.loads('{"a": "\\ud83d\\ude80"}') == {"a": "\U0001f680"}   # a surrogate pair is one character


def test_environment_is_bounded_and_checked_in_process_too() -> None:
    adapter = TypeAdapter(Environment)
    assert adapter.validate_python({"k" * 200: "v" * 10_000, "path": "/tmp/Grüße"})
    for bad in ({"k" * 201: "v"}, {"k": "v" * 10_001}, {"": "v"}, {"path": "/tmp/\udcff"}, {"k\x00": "v"},
                {"k": "a\x00"}):
        with pytest.raises(ValidationError):
            adapter.validate_python(bad)
