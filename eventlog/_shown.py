"""A value as an error message shows it: its repr, bounded (an int of thousands of digits has no
repr at all past Python's conversion limit, and a message must never fail to be made)."""

from __future__ import annotations

__all__ = ["shown"]

_MAX_CHARS = 200
_MAX_INT_BITS = 256


def shown(value: object) -> str:
    """``repr(value)`` cut to a few hundred characters; a huge int by its size; a subclass of a
    built-in type (whose repr looks like the built-in's) with its type's name."""
    if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
        return f"an int of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 -- a repr that fails: name the type instead
        return f"a {type(value).__name__}"
    text = text if len(text) <= _MAX_CHARS else text[: _MAX_CHARS - 3] + "..."
    kind = type(value)
    if kind not in _PLAIN and kind is not bool and isinstance(value, _PLAIN):
        # a subclass of a built-in type looks like one ("2", "'s1'") but is refused for it
        return f"{text} (a {kind.__name__})"
    return text


_PLAIN = (int, float, str, bytes, list, tuple, dict)
