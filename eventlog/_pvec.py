"""An append-only persistent vector: O(1) amortized ``appended``, old versions never change.

Versions share one Python list; a version is a prefix of it. Appending to the newest version
extends the shared list in place; appending to an older version (a branch) copies its prefix
first. So a fold that applies events one by one costs O(1) per event, and every earlier state
still sees exactly what it saw.

Thread safety without a lock: ``list.append`` and ``list.extend`` are atomic in CPython. A
version appends to the shared list only when the list ends exactly where the version ends, and
then checks that its own items landed right after its prefix; if another thread's append got
there first, it falls back to a copy. Stray items left behind by the loser are beyond every
version's length and are never seen.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import Generic, TypeVar, overload

__all__ = ["PVec"]

T = TypeVar("T")


class PVec(Sequence[T], Generic[T]):
    """An immutable sequence with a cheap :meth:`appended` and :meth:`extended`."""

    __slots__ = ("_items", "_len")

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._items: list[T] = list(items)
        self._len = len(self._items)

    def appended(self, item: T) -> PVec[T]:
        """Return a new vector with ``item`` at the end; ``self`` is unchanged."""
        items, n = self._items, self._len
        if len(items) == n:
            items.append(item)
            if items[n] is item:
                v: PVec[T] = PVec.__new__(PVec)
                v._items, v._len = items, n + 1
                return v
        copy = items[:n]
        copy.append(item)
        v = PVec.__new__(PVec)
        v._items, v._len = copy, n + 1
        return v

    def extended(self, new: Sequence[T]) -> PVec[T]:
        """Return a new vector with ``new`` at the end; ``self`` is unchanged."""
        if not new:
            return self
        items, n, k = self._items, self._len, len(new)
        if len(items) == n:
            items.extend(new)
            if all(map(operator.is_, items[n : n + k], new)):
                v: PVec[T] = PVec.__new__(PVec)
                v._items, v._len = items, n + k
                return v
        copy = items[:n]
        copy.extend(new)
        v = PVec.__new__(PVec)
        v._items, v._len = copy, n + k
        return v

    def replaced_last(self, item: T) -> PVec[T]:
        """Return a new vector whose last item is ``item`` (O(n): a copy)."""
        if not self._len:
            raise IndexError("replaced_last on an empty PVec")
        return PVec([*self._items[: self._len - 1], item])

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...
    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        if isinstance(index, slice):
            if index.step is not None and index.step < 0:
                return self._items[: self._len][index]
            start, stop, step = index.indices(self._len)  # no copy of the whole prefix
            return self._items[start:stop:step]
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
            return self._len == other._len and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"PVec({list(self)!r})"
