"""The ``timeout`` of a wait: ``None`` (as long as it takes) or a number of seconds >= 0."""

from __future__ import annotations

import threading

from ._errors import InvalidArgumentError
from ._numbers import plain_number
from ._shown import shown

__all__ = ["check_timeout"]


def check_timeout(value: object, name: str = "timeout") -> float | None:
    """``value`` as a timeout for ``threading`` waits: ``None``, or a float from 0 up to
    ``threading.TIMEOUT_MAX`` (a longer one waits that long). :class:`InvalidArgumentError`
    for anything else: a bool, a NaN, a negative number, a number whose comparisons fail."""
    if value is None:
        return None
    number = plain_number(value)  # compared before float(): a huge int is no OverflowError
    seconds: float | None = None
    if number is not None and number >= threading.TIMEOUT_MAX:
        seconds = threading.TIMEOUT_MAX
    elif number is not None and number >= 0:  # NaN fails it
        seconds = float(number)
    if seconds is None:
        raise InvalidArgumentError(
            f"{name} must be None or a number of seconds >= 0, got {shown(value)}"
        )
    return seconds
