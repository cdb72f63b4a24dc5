"""What every converter returns, and the checks they share (times, types, error collection)."""

from __future__ import annotations

import math
import dataclasses
from dataclasses import dataclass
from typing import Any

from pipeline.contracts import ContractError

UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
HOST_NAME_MAX = 64
"""A host name's longest (Linux's HOST_NAME_MAX); an import's device uid is `import:<class>:<host>`."""
DEVICE_NAME_MAX = 200
"""A device's name, as `DeviceInfo.name` keeps it."""


@dataclass(frozen=True)
class Benchmark:
    """One benchmark of a foreign file: the name mapping rules match, where it sits in the file,
    and its latency samples in seconds (or why there are none)."""

    name: str
    field: str
    samples: list[float] = dataclasses.field(default_factory=list)
    error: str | None = None
    skipped: str | None = None
    environment: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Parsed:
    tool: str
    benchmarks: list[Benchmark]
    device_name: str = ""
    host: str = ""
    environment: dict[str, str] = dataclasses.field(default_factory=dict)


class Problems:
    """Collects (field, reason) pairs so that one answer names every problem of a file."""

    def __init__(self, document: str):
        self.document = document
        self.errors: list[tuple[str, str]] = []

    def add(self, path: str, reason: str) -> None:
        self.errors.append((f"data.{path}" if path else "data", reason))

    def raise_if_any(self) -> None:
        if self.errors:
            raise ContractError(self.document, self.errors)


def as_object(value: Any, path: str, problems: Problems) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        problems.add(path, f"must be a JSON object, got {type(value).__name__}")
        return None
    return value


def as_list(value: Any, path: str, problems: Problems) -> list[Any] | None:
    if not isinstance(value, list):
        problems.add(path, f"must be a JSON array, got {type(value).__name__}")
        return None
    return value


def as_str(value: Any, path: str, problems: Problems) -> str | None:
    if not isinstance(value, str) or not value:
        problems.add(path, f"must be a non-empty string, got {value!r}"[:200])
        return None
    return value


def is_int(value: Any) -> bool:
    """A JSON integer: `true` is not one (Python's bool is an int, and `true == 1`)."""
    return isinstance(value, int) and not isinstance(value, bool)


def as_version(value: Any, expected: int, path: str, problems: Problems, what: str) -> bool:
    """Whether `value` is the version `expected` (an integer, not `true`); a problem naming `what` when not."""
    if is_int(value) and value == expected:
        return True
    problems.add(path, f"unknown schema version {value!r}; this server reads {what}"[:300])
    return False


def as_text(value: Any, path: str, problems: Problems, max_length: int) -> str:
    """A text of the file kept with its results (a host or device name): "" when absent, a problem
    when longer than `max_length` characters."""
    text = "" if value is None else str(value)
    if len(text) > max_length:
        problems.add(path, f"must be at most {max_length} characters, got {len(text)}")
        return ""
    return text


def as_time(value: Any, unit: str, path: str, problems: Problems, *, numeric_strings: bool = False) -> float | None:
    """`value` in `unit` as seconds; refused (named) when not a number, NaN, infinite, zero or negative."""
    if numeric_strings and isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            problems.add(path, f"must be a number, got {value!r}"[:200])
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        problems.add(path, f"must be a number, got {type(value).__name__} {value!r}"[:200])
        return None
    if math.isnan(value):
        problems.add(path, "is NaN; a time must be a positive finite number")
        return None
    if math.isinf(value):
        problems.add(path, "is infinite; a time must be a positive finite number")
        return None
    if value <= 0:
        problems.add(path, f"is {value!r}; a time must be positive (negative or zero times are refused)")
        return None
    seconds = float(value) * UNIT_SECONDS[unit]
    if seconds <= 0 or not math.isfinite(seconds):
        problems.add(path, f"{value!r} {unit} is not representable in seconds")
        return None
    return seconds
