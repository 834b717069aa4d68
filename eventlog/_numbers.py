"""Numbers given as arguments, as plain ``int`` and ``float``."""

from __future__ import annotations

__all__ = ["plain_number"]


def plain_number(value: object) -> int | float | None:
    """``value`` as an exact ``int`` or ``float`` (a subclass's value is copied: its own
    methods, comparisons included, are never called), or ``None`` when it is no number (a
    bool is none either)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    return None
