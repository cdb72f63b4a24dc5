"""The largest integers a document may carry where the store keeps them in integer columns.

PostgreSQL refuses a larger one with a driver error, SQLite past 64 bits too: bounded in the
contracts, a larger value is refused naming its field, alike on both stores. (Text lengths are
bounded field by field, at their columns' lengths; NUL characters are refused by `strict_json`.)
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

__all__ = ["INT32_MAX", "INT64_MAX", "Count32", "Count64"]

INT32_MAX = 2**31 - 1
"""PostgreSQL `integer`: row ids, pull request numbers, registers, spills, shared bytes."""
INT64_MAX = 2**63 - 1
"""PostgreSQL `bigint`: binary sizes, FLOPs and bytes per call."""

Count32 = Annotated[int, Field(ge=0, le=INT32_MAX)]
Count64 = Annotated[int, Field(ge=0, le=INT64_MAX)]
