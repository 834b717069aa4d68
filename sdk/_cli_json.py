"""Reading the JSON the CLI is given (transcripts, scripts) strictly: what is not JSON, or
would not come back as it was written, is refused rather than read as something else."""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["strict_loads"]


def strict_loads(text: str) -> Any:
    """``text`` as JSON; raises ``ValueError`` for what JSON is not (``NaN``, ``Infinity``, a
    number too large for a float) and for what would be lost (a key given twice in one
    object), ``RecursionError`` for arrays or objects nested too deeply."""
    return json.loads(
        text, parse_constant=_no_constant, parse_float=_finite, object_pairs_hook=_unique_keys
    )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is too large for a float")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} appears twice in one object")
        out[key] = value
    return out
