"""The checks of the arguments the context layer's objects take: counts and message lists."""

from __future__ import annotations

from collections.abc import Sequence

from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError
from liteagent.eventlog.types import Message

__all__ = ["MOST", "check_int", "check_messages"]

MOST = 2**62  # recorded in context statuses and pass reports: within msgpack's integers


def check_int(name: str, value: object, least: int, *, optional: bool = False) -> None:
    """Raise :class:`InvalidArgumentError` unless ``value`` is an int in ``least..MOST`` (or
    ``None``, when ``optional``); a bool, a float or NaN is no int here."""
    if value is None and optional:
        return
    if type(value) is not int or not least <= value <= MOST:
        raise InvalidArgumentError(f"{name} must be an int in {least}..{MOST}, got {shown(value)}")


def check_messages(messages: object, where: str) -> Sequence[Message]:
    """``messages`` when it is a list or tuple of :class:`Message`; else
    :class:`InvalidArgumentError` naming ``where`` (a pass, a compactor, a middleware)."""
    if not isinstance(messages, (list, tuple)):
        raise InvalidArgumentError(
            f"{where}: messages must be a list of Message, got {type(messages).__name__}"
        )
    for i, message in enumerate(messages):
        if type(message) is not Message:
            raise InvalidArgumentError(
                f"{where}: messages[{i}] must be a Message, got {type(message).__name__}"
            )
    return messages
