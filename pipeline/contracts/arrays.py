"""Arrays of numbers, packed: one codec for the result document on the wire and for the store.

A full suite's result document holds millions of numbers (samples, paired base samples, per-sample
clocks and temperatures). As JSON text a float64 costs ~23 bytes; packed (little-endian float64,
zlib, base64) a latency sample costs ~4.7 bytes and a clock or temperature under one
(BENCHMARKS.md, "Result upload and sample storage"). Two forms:

- on the wire, `PackedArray`: `{"dtype": "f64", "encoding": "zlib+base64", "count": N, "data": "..."}`.
  A contract field typed `SampleArray` / `ReadingArray` accepts it or a plain JSON list (imports,
  older agents, hand-written documents), holds a plain `list[float]` in memory, and is written
  packed by `model_dump(mode="json")` / `model_dump_json()`;
- in the store, `to_blob` / `from_blob`: the raw little-endian float64 bytes (one column per
  measurement instead of one row per sample).

float64 on both: the store keeps exactly what the agent measured, and float32 would save only
~13 % of a compressed sample (timings repeat: event timers have a coarse resolution).
"""

from __future__ import annotations

import base64
import binascii
import sys
import zlib
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
)

from pipeline.contracts.limits import Int

__all__ = ["PackedArray", "pack", "unpack", "to_blob", "from_blob", "SampleArray", "ReadingArray", "packed_or_list"]

_DTYPES: dict[str, np.dtype[np.floating]] = {"f64": np.dtype("<f8"), "f32": np.dtype("<f4")}
_ZLIB_LEVEL = 1
"""Level 1: most of level 6's ratio on timings at a third of its time (the agent packs millions)."""


class PackedArray(BaseModel):
    """A list of numbers as compressed little-endian bytes; `count` says how many (checked)."""

    model_config = ConfigDict(extra="forbid")

    dtype: Literal["f64", "f32"] = Field(description="little-endian IEEE 754 float64 or float32")
    encoding: Literal["zlib+base64"] = Field(description="the bytes, zlib-compressed, then base64 (RFC 4648)")
    count: Int = Field(ge=0, description="how many numbers the data holds")
    data: str = Field(description="base64 of the zlib stream")


def pack(values: Sequence[float] | np.ndarray, *, dtype: Literal["f64", "f32"] = "f64") -> PackedArray:
    """`values` as a PackedArray (float64 by default: exact)."""
    raw = np.ascontiguousarray(values, dtype=_DTYPES[dtype]).tobytes()
    return PackedArray(dtype=dtype, encoding="zlib+base64", count=len(values),
                       data=base64.b64encode(zlib.compress(raw, _ZLIB_LEVEL)).decode("ascii"))


def unpack(packed: PackedArray) -> list[float]:
    """The numbers of a PackedArray; ValueError when its data is not what it says.

    The decompressed size is bounded by `count` before it is produced: a small body cannot
    inflate into gigabytes."""
    itemsize = _DTYPES[packed.dtype].itemsize
    try:
        compressed = base64.b64decode(packed.data, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"data is not base64: {exc}") from None
    expected = packed.count * itemsize
    if expected >= sys.maxsize:   # zlib's max_length is a C ssize_t: larger is an OverflowError, not a 4xx
        raise ValueError(f"count {packed.count} is more {packed.dtype} numbers than any document can hold")
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(compressed, expected + 1)
    except zlib.error as exc:
        raise ValueError(f"data is not a zlib stream: {exc}") from None
    if len(raw) != expected or inflater.unconsumed_tail or not inflater.eof:
        raise ValueError(f"data does not hold {packed.count} {packed.dtype} numbers "
                         f"({expected} bytes): it inflates to {'more' if len(raw) > expected else len(raw)} bytes")
    values: list[float] = np.frombuffer(raw, dtype=_DTYPES[packed.dtype]).astype(np.float64).tolist()
    return values


def to_blob(values: Sequence[float] | np.ndarray) -> bytes:
    """The store's form: raw little-endian float64 bytes, 8 per value."""
    return np.ascontiguousarray(values, dtype="<f8").tobytes()


def from_blob(blob: bytes | memoryview | None) -> list[float]:
    """The values of a `to_blob` column; an empty list for NULL."""
    if blob is None:
        return []
    if len(blob) % 8:
        raise ValueError(f"a float64 array column holds {len(blob)} bytes, not a multiple of 8")
    values: list[float] = np.frombuffer(bytes(blob), dtype="<f8").tolist()
    return values


# --- contract field types ----------------------------------------------------------------------


def packed_or_list(value: Any) -> Any:
    """Before validation: a packed array (an object) becomes its list of numbers; anything else
    is left for the list validation, which names a bad element by its index."""
    if isinstance(value, PackedArray):
        return unpack(value)
    if isinstance(value, dict):
        return unpack(PackedArray.model_validate(value))
    return value


def _packed_for_json(values: list[float] | None) -> dict[str, Any] | None:
    return None if values is None else pack(values).model_dump()


def _schema(items: dict[str, Any], description: str) -> WithJsonSchema:
    packed = PackedArray.model_json_schema()
    packed["title"] = "PackedArray"
    return WithJsonSchema({"description": description,
                           "anyOf": [packed, {"type": "array", "items": items}]})


SampleArray = Annotated[
    list[Annotated[float, Field(gt=0, allow_inf_nan=False)]],
    BeforeValidator(packed_or_list),
    PlainSerializer(_packed_for_json, when_used="json"),
    _schema({"type": "number", "exclusiveMinimum": 0},
            "latency samples in seconds (each > 0 and finite): a packed array or a JSON list"),
]
"""Latency samples in seconds: each finite and > 0."""

ReadingArray = Annotated[
    list[Annotated[float, Field(allow_inf_nan=False)]],
    BeforeValidator(packed_or_list),
    PlainSerializer(_packed_for_json, when_used="json"),
    _schema({"type": "number"}, "one reading per sample (finite): a packed array or a JSON list"),
]
"""Per-sample readings (SM clock in MHz, temperature in °C): each finite."""
