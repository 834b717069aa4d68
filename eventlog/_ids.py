"""Session id validation: an id is a name, never a path."""

from __future__ import annotations

import re

from ._errors import InvalidSessionIdError
from ._shown import shown

__all__ = ["SESSION_ID_PATTERN", "is_session_id", "validate_session_id"]

SESSION_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
_SESSION_ID = re.compile(SESSION_ID_PATTERN)


def is_session_id(value: object) -> bool:
    """Whether ``value`` is a valid session id (see :func:`validate_session_id`)."""
    return type(value) is str and _SESSION_ID.fullmatch(value) is not None


def validate_session_id(session_id: object) -> str:
    """Return ``session_id`` if it matches ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``.

    Raises :class:`InvalidSessionIdError` for anything else (``../x``, ``a/b``, ``""``, NUL,
    non-strings) before any I/O happens.
    """
    if type(session_id) is not str:  # a str subclass too: it could not be recorded as one
        raise InvalidSessionIdError(
            session_id,
            f"invalid session id {shown(session_id)}: a session id must be a str, got "
            f"{type(session_id).__name__}",
        )
    if _SESSION_ID.fullmatch(session_id) is None:
        raise InvalidSessionIdError(session_id)
    return session_id
