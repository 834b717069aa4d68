"""An opt-in logging setup for applications, daemons and the CLI; the library never calls it."""

from __future__ import annotations

import logging
import sys

import structlog

from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError

__all__ = ["configure_logging"]


def configure_logging(*, json: bool = False, level: str | int = "INFO") -> None:
    """Route structlog and stdlib logging (pykka's too) to stderr, as JSON lines (``json=True``,
    for daemons) or readable console lines, from ``level`` on (a level name such as ``"INFO"``
    or a number). Call it once, from the application."""
    if type(json) is not bool:
        raise InvalidArgumentError(f"json must be True or False, got {shown(json)}")
    names = logging.getLevelNamesMapping()
    if not ((type(level) is int and level >= 0) or (isinstance(level, str) and level in names)):
        raise InvalidArgumentError(
            f"level must be one of {sorted(names)} or an int >= 0, got {shown(level)}"
        )
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.dict_tracebacks if json else structlog.dev.set_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
