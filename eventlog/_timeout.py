"""The ``timeout`` of a wait: ``None`` (as long as it takes) or a number of seconds >= 0."""

from __future__ import annotations

import threading

from ._errors import InvalidArgumentError
from ._shown import shown

__all__ = ["check_timeout"]


def check_timeout(value: object, name: str = "timeout") -> float | None:
    """``value`` as a timeout for ``threading`` waits: ``None``, or a float from 0 up to
    ``threading.TIMEOUT_MAX`` (a longer one waits that long). :class:`InvalidArgumentError`
    for anything else: a bool, a NaN, a negative number, a number whose comparisons fail."""
    if value is None:
        return None
    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:  # compared before float(): an int beyond a float's range is no OverflowError
            if value >= threading.TIMEOUT_MAX:
                seconds = threading.TIMEOUT_MAX
            elif value >= 0:  # NaN fails it
                seconds = float(value)
        except Exception:  # noqa: BLE001,S110 -- a number subclass whose comparisons raise
            pass
    if seconds is None:
        raise InvalidArgumentError(
            f"{name} must be None or a number of seconds >= 0, got {shown(value)}"
        )
    return seconds
