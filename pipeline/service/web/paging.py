"""One page of a long list: the pages that could list thousands of rows show a page at a time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    number: int
    """1-based, clamped to the pages there are."""
    size: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.size))

    @property
    def first(self) -> int:
        """1-based position of the first item shown (0 when there is none)."""
        return (self.number - 1) * self.size + 1 if self.total else 0

    @property
    def last(self) -> int:
        return min(self.total, self.number * self.size)


def paginate(items: Sequence[T], number: int, size: int) -> Page[T]:
    """Page `number` (1-based; out-of-range numbers give the nearest page) of `size` items."""
    if size < 1:
        raise ValueError(f"page size must be positive, got {size}")
    pages = max(1, -(-len(items) // size))
    number = min(max(1, number), pages)
    return Page(list(items[(number - 1) * size:number * size]), number, size, len(items))
