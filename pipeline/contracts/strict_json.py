"""The one way a JSON body from outside becomes Python data: bounded, finite, well-encoded.

Every document that crosses into the service (result documents, batches, imports, webhooks) is read
by `loads`, so the same input gets the same refusal on every store and route:
- bytes that are not UTF-8: refused (not a 500 from a decode deep inside);
- nesting deeper than `MAX_DEPTH` arrays/objects: refused before parsing (the parser recurses; a
  100,000-deep body would exhaust the stack);
- `NaN`, `Infinity`, `-Infinity` (which Python's json reads though JSON has no such numbers), and
  numbers past a double's range (`1e999`, which it reads as infinity): refused wherever they
  appear, so every number stored is finite;
- text that may not be stored (a NUL character, a lone surrogate such as `\\ud800`), in any key or
  value at any depth: refused naming where (`pipeline.contracts.text`, the one rule for text).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pipeline.contracts.text import find_bad_text

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


def loads(body: bytes | str) -> Any:
    """`body` parsed (module doc), or BodyError naming the problem."""
    # surrogatepass: a str holding a lone surrogate is then refused as not UTF-8, not an encoding error here
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
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
        data = json.loads(text, parse_constant=constant, parse_float=number)
    except json.JSONDecodeError as exc:
        raise BodyError(f"not JSON: {exc}") from None
    if constants:
        where, name = _find(data) or ((), constants[0].name)
        raise BodyError(f"{name} is not a JSON number; every number must be finite", ".".join(where) or "(document)")
    if (bad := find_bad_text(data)) is not None:
        raise BodyError(bad[1], bad[0])
    return data
