"""Errors of the public facade."""

from __future__ import annotations

from liteagent.eventlog.errors import LiteAgentError

__all__ = ["AgentClosedError", "SessionsDisabledError"]


class SessionsDisabledError(LiteAgentError):
    """Raised when a session method (resume, list_sessions, delete_session) is called on an
    agent created with ``sessions=False``."""


class AgentClosedError(LiteAgentError):
    """Raised when a closed agent is used."""
