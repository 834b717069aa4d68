"""The argument checks of the public API: each raises :class:`InvalidArgumentError` (or
:class:`InvalidSessionIdError`) naming what was wrong, before anything is written."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from liteagent.eventlog import CancelToken, validate_session_id
from liteagent.eventlog._numbers import plain_number
from liteagent.eventlog._paths import check_path as eventlog_check_path
from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError

__all__ = [
    "MAX_COUNT",
    "MAX_SECONDS",
    "check_bool",
    "check_cancel",
    "check_count",
    "check_grace",
    "check_path",
    "check_prompt",
    "check_seconds",
    "check_seq",
    "check_sequence",
    "check_session_id",
    "check_text",
    "check_workdir",
    "exact_str",
]

MAX_COUNT = 2**31 - 1
"""The largest count (turns, tokens, sessions, queued sends) an argument may give."""
MAX_SECONDS = 10 * 365 * 24 * 3600.0
_MAX_SEQ = 2**63 - 1


def exact_str(text: str) -> str:
    """``text`` as a plain ``str``: a subclass of it passes ``isinstance`` but its methods may
    be anything and the log encodes plain strings only, so its characters are copied into one
    before anything else looks at it."""
    return text if type(text) is str else str.__str__(text)


def _encodable(value: str, name: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(
            f"{name} is not valid text: a lone surrogate {value[e.start]!r} at index {e.start}"
        ) from None
    return value


def check_text(value: object, name: str, *, optional: bool = False) -> str | None:
    """A string that UTF-8 can encode (``None`` too when ``optional``)."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        kind = "None or a string" if optional else "a string"
        raise InvalidArgumentError(f"{name} must be {kind}, got {type(value).__name__}")
    return _encodable(exact_str(value), name)


def check_prompt(value: object) -> str:
    """A user prompt: a string with something besides whitespace (the Messages API refuses
    empty text blocks, so an empty prompt would break every later request of the session)."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"the prompt must be a string, got {type(value).__name__}")
    value = exact_str(value)
    if not value.strip():
        raise InvalidArgumentError("the prompt is empty (or only whitespace); nothing was sent")
    return _encodable(value, "the prompt")


def check_cancel(value: object) -> CancelToken | None:
    """``None`` or a :class:`CancelToken`."""
    if value is not None and not isinstance(value, CancelToken):
        raise InvalidArgumentError(
            f"cancel must be None or a CancelToken, got {type(value).__name__}"
        )
    return value


def check_session_id(value: object) -> str | None:
    """``None`` or a valid session id (:class:`InvalidSessionIdError` otherwise)."""
    return None if value is None else validate_session_id(value)


def check_bool(value: object, name: str) -> bool:
    """``True`` or ``False`` (not merely truthy)."""
    if type(value) is not bool:
        raise InvalidArgumentError(f"{name} must be True or False, got {shown(value)}")
    return value


def check_count(value: object, name: str, minimum: int = 1) -> int:
    """An int in ``[minimum, MAX_COUNT]`` (bools are not ints here)."""
    if type(value) is not int or not minimum <= value <= MAX_COUNT:
        raise InvalidArgumentError(
            f"{name} must be an int from {minimum} to {MAX_COUNT}, got {shown(value)}"
        )
    return value


def check_seq(value: object) -> int:
    """A log position: an int >= 1 (and below 2**63)."""
    if type(value) is not int or not 1 <= value <= _MAX_SEQ:
        raise InvalidArgumentError(f"seq must be an int from 1 to 2**63-1, got {shown(value)}")
    return value


def check_seconds(value: object, name: str) -> float | None:
    """``None`` or a finite number of seconds > 0 (at most ten years)."""
    if value is None:
        return None
    seconds = plain_number(value)
    if seconds is None or not 0 < seconds <= MAX_SECONDS:  # NaN fails it; no float() of a huge int
        raise InvalidArgumentError(
            f"{name} must be None or a number of seconds > 0 (at most ten years), "
            f"got {shown(value)}"
        )
    return float(seconds)


def check_grace(value: object, name: str, *, optional: bool = False) -> float | None:
    """A finite number of seconds >= 0 (``None`` too when ``optional``)."""
    if value is None and optional:
        return None
    seconds = plain_number(value)
    # a comparison, not isfinite(): an int beyond a float's range is no OverflowError
    if seconds is None or not 0 <= seconds <= MAX_SECONDS:
        raise InvalidArgumentError(
            f"{name} must be {'None or ' if optional else ''}a number of seconds >= 0 (at most "
            f"ten years), got {shown(value)}"
        )
    return float(seconds)


def check_path(
    value: object, name: str, *, optional: bool = False
) -> str | os.PathLike[str] | None:
    """``value`` when it names a path (see :func:`liteagent.eventlog._paths.check_path`; ``None``
    too when ``optional``)."""
    if value is None and optional:
        return None
    return eventlog_check_path(name, value)  # a plain str: fspath is called once


def check_workdir(value: object) -> Path:
    """An existing folder, resolved."""
    checked = check_path(value, "workdir")
    assert checked is not None
    try:
        root = Path(checked).expanduser().resolve()
        is_dir = root.is_dir()
    except (OSError, RuntimeError, ValueError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)[:200]
        raise InvalidArgumentError(f"workdir {shown(str(checked))} cannot be used: {reason}") from e
    if not is_dir:
        raise InvalidArgumentError(f"workdir {shown(str(root))} is not a folder")
    try:
        str(root).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            f"workdir {shown(str(root))} is not valid UTF-8: the session log keeps the "
            "workspace's path and its files' names as text; use a folder whose path is UTF-8"
        ) from None
    return root


def check_sequence(value: object, name: str, kind: type | tuple[type, ...]) -> list[Any]:
    """A list or tuple (not a string) whose items are instances of ``kind``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidArgumentError(f"{name} must be a list or tuple, got {type(value).__name__}")
    items = list(value)
    for i, item in enumerate(items):
        if not isinstance(item, kind):
            expected = (
                kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            )
            raise InvalidArgumentError(
                f"{name}[{i}] must be a {expected}, got {type(item).__name__}"
            )
    return items
