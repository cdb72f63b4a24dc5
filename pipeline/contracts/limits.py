"""The largest integers a document may carry where the store keeps them in integer columns.

PostgreSQL refuses a larger one with a driver error, SQLite past 64 bits too: bounded in the
contracts, a larger value is refused naming its field, alike on both stores. They are strict: a
JSON `true` or `1.0` is not a count (lax pydantic would take them as 1). (Text lengths are bounded
field by field, at their columns' lengths; what text may hold: `pipeline.contracts.text`.)
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, Strict

__all__ = ["INT32_MAX", "INT64_MAX", "Count32", "Count64", "Int", "RowRef"]

INT32_MAX = 2**31 - 1
"""PostgreSQL `integer`: row ids, pull request numbers, registers, spills, shared bytes."""
INT64_MAX = 2**63 - 1
"""PostgreSQL `bigint`: binary sizes, FLOPs and bytes per call."""

Int = Annotated[int, Strict()]
"""An integer of a document: a JSON integer, never `true` or `1.0`."""
Count32 = Annotated[int, Strict(), Field(ge=0, le=INT32_MAX)]
Count64 = Annotated[int, Strict(), Field(ge=0, le=INT64_MAX)]
RowRef = Annotated[int, Strict(), Field(ge=1, le=INT32_MAX)]
"""A stored row's id in a document (the address's ids: `RowId` of the API, read from text)."""
