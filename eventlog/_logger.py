"""The library's loggers: structlog when the application configured it, stdlib logging if not.

The library never configures logging. structlog left unconfigured prints every event, debug
included, to stdout, which would mix the library's notes into a script's own output. So each
event goes, at the moment it is logged, to structlog when the application has configured it
(``structlog.configure``, or :func:`liteagent.sdk.configure_logging`), and otherwise to the
stdlib logger of the same name, as "event key=value ...": with no handler set up, Python shows
warnings and errors on stderr and nothing else, as for any library.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

__all__ = ["Logger", "get_logger"]


class Logger:
    """A logger named ``liteagent.<area>`` with its bound key-value pairs."""

    __slots__ = ("_context", "_name")

    def __init__(self, name: str, context: dict[str, Any] | None = None) -> None:
        self._name = name
        self._context = context or {}

    def bind(self, **values: Any) -> Logger:
        """A logger adding ``values`` to every event."""
        return Logger(self._name, {**self._context, **values})

    def debug(self, event: str, **values: Any) -> None:
        self._emit(logging.DEBUG, "debug", event, values)

    def info(self, event: str, **values: Any) -> None:
        self._emit(logging.INFO, "info", event, values)

    def warning(self, event: str, **values: Any) -> None:
        self._emit(logging.WARNING, "warning", event, values)

    def error(self, event: str, **values: Any) -> None:
        self._emit(logging.ERROR, "error", event, values)

    def exception(self, event: str, **values: Any) -> None:
        """An error with the exception being handled."""
        values.setdefault("exc_info", True)
        self._emit(logging.ERROR, "error", event, values)

    def _emit(self, level: int, method: str, event: str, values: dict[str, Any]) -> None:
        fields = {**self._context, **values}
        if structlog.is_configured():
            getattr(structlog.get_logger(self._name), method)(event, **fields)
            return
        std = logging.getLogger(self._name)
        if not std.isEnabledFor(level):
            return
        exc_info = fields.pop("exc_info", None)
        text = " ".join([event, *(f"{key}={value!r}" for key, value in fields.items())])
        std.log(level, "%s", text, exc_info=exc_info)


def get_logger(name: str) -> Logger:
    """The library's logger ``name`` (``liteagent.<area>``)."""
    return Logger(name)
