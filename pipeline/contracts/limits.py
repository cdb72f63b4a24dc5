"""The largest integers a document may carry where the store keeps them in integer columns.

PostgreSQL refuses a larger one with a driver error, SQLite past 64 bits too: bounded in the
contracts, a larger value is refused naming its field, alike on both stores. A JSON `true` is not an
integer (pydantic's int takes it as 1; JSON Schema's "integer" does not), so these refuse booleans
(`Int`); `1.0` is an integer to both. (Text lengths are bounded field by field, at their columns'
lengths; what text may hold: `pipeline.contracts.text`.)
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

__all__ = ["INT32_MAX", "INT64_MAX", "NOT_BOOLEAN", "Count32", "Count64", "Int", "RowRef"]

INT32_MAX = 2**31 - 1
"""PostgreSQL `integer`: row ids, pull request numbers, registers, spills, shared bytes."""
INT64_MAX = 2**63 - 1
"""PostgreSQL `bigint`: binary sizes, FLOPs and bytes per call."""


def _not_a_boolean(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError(f"must be an integer, not a boolean ({str(value).lower()})")
    return value


NOT_BOOLEAN = BeforeValidator(_not_a_boolean)
"""Last in an `Annotated[int, ...]` (after any bounds, which then stay in the JSON Schema)."""
Int = Annotated[int, NOT_BOOLEAN]
"""An integer of a document: never `true` or `false`."""
Count32 = Annotated[int, Field(ge=0, le=INT32_MAX), NOT_BOOLEAN]
Count64 = Annotated[int, Field(ge=0, le=INT64_MAX), NOT_BOOLEAN]
RowRef = Annotated[int, Field(ge=1, le=INT32_MAX), NOT_BOOLEAN]
"""A stored row's id in a document (the address's ids: `RowId` of the API, read from text)."""
