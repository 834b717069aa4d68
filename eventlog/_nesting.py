"""How deeply an event may nest: a fixed bound, so that what a write accepts every read decodes.

msgspec and ``json`` decode nested arrays and maps recursively, within Python's recursion limit
*from wherever they are called*: a value nested 980 levels reads back in a shallow script and
raises ``RecursionError`` deep inside an agent's turn. So a write refuses an event whose body
nests more than :data:`MAX_NESTING` levels, whatever the writer's own stack, and a message of
the Messages API that would make one is refused when it is converted.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_MESSAGE_NESTING", "MAX_NESTING", "nests_deeper", "packed_nests_deeper"]

MAX_NESTING = 256
"""The deepest nesting of arrays and maps in one stored event body (its own map is level 1)."""

MAX_MESSAGE_NESTING = MAX_NESTING - 16
"""The deepest nesting of a message dict of the Messages API (its own object is level 1): the
event that holds it adds a few levels of its own."""

# the msgpack bytes that start an array or a map: fixmap, fixarray, array 16/32, map 16/32
_NOT_CONTAINER = bytes(b for b in range(256) if not (0x80 <= b <= 0x9F or 0xDC <= b <= 0xDF))


def nests_deeper(value: Any, limit: int) -> bool:
    """Whether the JSON-like ``value`` (dicts, lists, tuples, scalars) nests more than
    ``limit`` levels of containers; iterative, so any depth is answered."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        t = type(item)
        if t is dict:
            children: Any = item.values()
        elif t is list or t is tuple:
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def packed_nests_deeper(data: bytes, limit: int, decode: Any) -> bool:
    """Whether the msgpack ``data`` nests more than ``limit`` levels. Cheap in the usual case:
    data with at most ``limit`` bytes that can start a container cannot; otherwise it is
    decoded (``decode``, an untyped decoder) and walked (a value too deep for the decoder
    itself nests too deeply too)."""
    if len(data.translate(None, _NOT_CONTAINER)) <= limit:
        return False
    try:
        value = decode(data)
    except RecursionError:
        return True
    return nests_deeper(value, limit)
