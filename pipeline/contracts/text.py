"""The one rule for text that may be stored: valid Unicode (encodable as UTF-8: no lone surrogate
such as the JSON escape `\\ud800`), no NUL character, and a bounded length.

PostgreSQL text cannot hold NUL (a driver error there, stored on SQLite: the stores would answer
alike only by refusing it); a lone surrogate is stored by both and then breaks every read that
encodes it (a 500 on each `GET` of the document). So every string from outside is checked here,
key or value at any depth: the bodies by `strict_json.loads`, the web forms by the service's form
reader, the address by the service. Lengths are bounded by the documents' fields (at their
columns' lengths); free-form maps such as an `environment` by `Environment`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field

__all__ = ["ENVIRONMENT_KEY_MAX", "ENVIRONMENT_VALUE_MAX", "Environment", "find_bad_text", "text_problem"]

ENVIRONMENT_KEY_MAX = 200
ENVIRONMENT_VALUE_MAX = 10_000
"""An environment entry's value: a version, a setting, a count (the longest an agent sends is ~100)."""

def text_problem(value: str) -> str | None:
    """Why `value` may not be stored, or None when it may."""
    if "\x00" in value:
        return "text must not contain NUL characters"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            # the character itself is not shown: it would break the answer's own encoding
            return (f"text must be valid Unicode: a lone surrogate (U+{ord(value[exc.start]):04X}) at character "
                    f"{exc.start}")
    return None


def _checked(value: str) -> str:
    if (problem := text_problem(value)) is not None:
        raise ValueError(problem)
    return value


Environment = dict[Annotated[str, Field(min_length=1, max_length=ENVIRONMENT_KEY_MAX), AfterValidator(_checked)],
                   Annotated[str, Field(max_length=ENVIRONMENT_VALUE_MAX), AfterValidator(_checked)]]
"""What a result or case was measured with: name -> value, both bounded and checked here too, since
documents made in process (`benchfarm run`, an import's converter) are not read by `strict_json`: a
path decoded with surrogateescape, say, would otherwise be stored and then break every read."""


def _shown(key: str) -> str:
    """A key as a field path may name it: NUL and surrogates escaped, at most 40 characters."""
    return key[:40].encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def find_bad_text(data: Any) -> tuple[str, str] | None:
    """A string of `data` (parsed JSON or a form: dicts, lists, keys and values at any depth) that
    breaks the rule, as its dotted path ("(document)" for `data` itself) and the reason; None if none."""
    stack: list[tuple[tuple[str, ...], Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if (problem := text_problem(value)) is not None:
                return ".".join(path) or "(document)", problem
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and (problem := text_problem(key)) is not None:
                    return ".".join((*path, _shown(key))), f"a key: {problem}"
                if isinstance(item, (str, dict, list)):
                    stack.append(((*path, _shown(str(key))), item))
        elif isinstance(value, list):
            stack.extend(((*path, str(i)), item) for i, item in enumerate(value) if isinstance(item, (str, dict, list)))
    return None
