"""An append-only persistent vector: O(1) amortized ``appended``, old versions never change.

Versions share one Python list; a version is a prefix of it. Appending to the newest version
extends the shared list in place; appending to an older version (a branch) copies its prefix
first. So a fold that applies events one by one costs O(1) per event, and every earlier state
still sees exactly what it saw.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar, overload

__all__ = ["PVec"]

T = TypeVar("T")


class PVec(Sequence[T], Generic[T]):
    """An immutable sequence with a cheap :meth:`appended`."""

    __slots__ = ("_items", "_len", "_lock")

    def __init__(self, items: Sequence[T] = ()) -> None:
        self._items: list[T] = list(items)
        self._len = len(self._items)
        self._lock = threading.Lock()

    @classmethod
    def _share(cls, items: list[T], length: int, lock: threading.Lock) -> PVec[T]:
        v: PVec[T] = cls.__new__(cls)
        v._items, v._len, v._lock = items, length, lock
        return v

    def appended(self, item: T) -> PVec[T]:
        """Return a new vector with ``item`` at the end; ``self`` is unchanged."""
        with self._lock:
            if len(self._items) == self._len:
                self._items.append(item)
                return PVec._share(self._items, self._len + 1, self._lock)
        items = self._items[: self._len]
        items.append(item)
        return PVec._share(items, self._len + 1, threading.Lock())

    def replaced_last(self, item: T) -> PVec[T]:
        """Return a new vector whose last item is ``item`` (O(n): a copy)."""
        if not self._len:
            raise IndexError("replaced_last on an empty PVec")
        items = self._items[: self._len - 1]
        items.append(item)
        return PVec._share(items, self._len, threading.Lock())

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...
    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        if isinstance(index, slice):
            return self._items[: self._len][index]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("PVec index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[T]:
        items = self._items
        for i in range(self._len):
            yield items[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PVec):
            return self._len == other._len and all(
                a == b for a, b in zip(self, other, strict=True)
            )
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"PVec({list(self)!r})"
