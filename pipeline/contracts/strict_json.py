"""The one way a JSON body from outside becomes Python data: bounded, finite, well-encoded.

Every document that crosses into the service (result documents, batches, imports, webhooks) is read
by `loads`, so the same input gets the same refusal on every store and route:
- bytes that are not UTF-8: refused (not a 500 from a decode deep inside);
- nesting deeper than `MAX_DEPTH` arrays/objects: refused before parsing (the parser recurses; a
  100,000-deep body would exhaust the stack);
- `NaN`, `Infinity`, `-Infinity` (which Python's json reads though JSON has no such numbers), and
  numbers past a double's range (`1e999`, which it reads as infinity): refused wherever they
  appear, so every number stored is finite;
- NUL characters in strings: refused (PostgreSQL text cannot hold them; SQLite could, and the two
  stores must answer alike).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["MAX_DEPTH", "BodyError", "loads"]

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects taken; our documents nest 5 levels."""

_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


class BodyError(ValueError):
    """A body that is not acceptable JSON; the message says why, `field` where ("(document)": the whole)."""

    def __init__(self, reason: str, field: str = "(document)") -> None:
        super().__init__(reason)
        self.field = field


def _depth(body: bytes) -> int:
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return 0
    depth = deepest = 0
    for match in _TOKENS.finditer(body):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif token in (b"]", b"}"):
            depth -= 1
    return deepest


class _NonFinite:
    """What NaN / Infinity parse to, so that the refusal can name where they were."""

    def __init__(self, name: str) -> None:
        self.name = name


def _find(data: Any, path: tuple[str, ...] = ()) -> tuple[tuple[str, ...], str] | None:
    if isinstance(data, _NonFinite):
        return path, data.name
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        if isinstance(value, (dict, list, _NonFinite)) and (found := _find(value, (*path, str(key)))):
            return found
    return None


def _no_nul(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    for key, value in pairs:
        if "\x00" in key or (isinstance(value, str) and "\x00" in value):
            raise BodyError(f"field {key[:40]!r}: text must not contain NUL characters")
    return dict(pairs)


def loads(body: bytes | str) -> Any:
    """`body` parsed (module doc), or BodyError naming the problem."""
    raw = body.encode() if isinstance(body, str) else body
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(f"not UTF-8: byte {exc.start} ({raw[exc.start:exc.start + 1]!r})") from None
    if _depth(raw) > MAX_DEPTH:
        raise BodyError(f"nested more than {MAX_DEPTH} levels deep")
    constants: list[_NonFinite] = []

    def constant(name: str) -> _NonFinite:
        constants.append(_NonFinite(name))
        return constants[-1]

    def number(literal: str) -> float | _NonFinite:
        value = float(literal)   # 1e999 is a JSON number, and Python reads it as inf
        return value if math.isfinite(value) else constant(f"{literal[:30]} (out of a double's range)")

    try:
        data = json.loads(text, parse_constant=constant, parse_float=number, object_pairs_hook=_no_nul)
    except json.JSONDecodeError as exc:
        raise BodyError(f"not JSON: {exc}") from None
    if constants:
        where, name = _find(data) or ((), constants[0].name)
        raise BodyError(f"{name} is not a JSON number; every number must be finite", ".".join(where) or "(document)")
    if isinstance(data, str) and "\x00" in data:
        raise BodyError("text must not contain NUL characters")
    if isinstance(data, list) and any(isinstance(v, str) and "\x00" in v for v in data):
        raise BodyError("text must not contain NUL characters")
    return data
