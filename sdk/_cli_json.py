"""Reading the JSON the CLI is given (transcripts, scripts) strictly: what is not JSON, or
would not come back as it was written, is refused rather than read as something else."""

from __future__ import annotations

import json
import math
from typing import Any

from liteagent.eventlog.errors import InvalidMessageError

__all__ = ["check_finite", "strict_loads"]


def strict_loads(text: str) -> Any:
    """``text`` as JSON; raises ``ValueError`` for what JSON is not (``NaN``, ``Infinity``, a
    number too large for a float), for what cannot be read (an integer of more than 4,300
    digits) and for what would be lost (a key given twice in one object), ``RecursionError``
    for arrays or objects nested too deeply."""
    return json.loads(
        text,
        parse_constant=_no_constant,
        parse_float=_finite,
        parse_int=_integer,
        object_pairs_hook=_unique_keys,
    )


_MAX_DIGITS = 4300  # Python's own limit for reading an int from text


def _integer(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > _MAX_DIGITS:
        raise ValueError(f"a number of {digits} digits is too long (at most {_MAX_DIGITS})")
    return int(text)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is too large for a float")
    if value == 0.0 and any(c in "123456789" for c in text.partition("e")[0].partition("E")[0]):
        raise ValueError(f"the number {text} is too small for a float (it would be 0)")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} appears twice in one object")
        out[key] = value
    return out


def check_finite(message: dict[str, Any], where: str) -> None:
    """Raise :class:`InvalidMessageError` naming the block of ``message`` (a message dict)
    that holds a number JSON has no form for (NaN, an infinity: a log can hold one, a
    transcript cannot carry it back)."""
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    for i, block in enumerate(blocks):
        number = _not_finite(block)
        if number is not None:
            raise InvalidMessageError(f"{where} content[{i}]: not JSON data (the number {number})")
    number = _not_finite({k: v for k, v in message.items() if k != "content"})
    if number is not None:
        raise InvalidMessageError(f"{where}: not JSON data (the number {number})")


def _not_finite(value: Any) -> str | None:
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is float and not math.isfinite(v):
            return repr(v)
        if type(v) is dict:
            stack.extend(v.values())
        elif type(v) is list or type(v) is tuple:
            stack.extend(v)
    return None
