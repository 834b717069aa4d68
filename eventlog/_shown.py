"""A value as an error message shows it: its repr, bounded (an int of thousands of digits has no
repr at all past Python's conversion limit, and a message must never fail to be made)."""

from __future__ import annotations

__all__ = ["shown"]

_MAX_CHARS = 200
_MAX_INT_BITS = 256


def shown(value: object) -> str:
    """``repr(value)`` cut to a few hundred characters; a huge int by its size."""
    if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
        return f"an int of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 -- a repr that fails: name the type instead
        return f"a {type(value).__name__}"
    return text if len(text) <= _MAX_CHARS else text[: _MAX_CHARS - 3] + "..."
