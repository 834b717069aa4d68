"""The errors of the actor layer that several of its modules raise."""

from __future__ import annotations

from liteagent.eventlog.errors import LiteAgentError

__all__ = ["AgentBusyError"]


class AgentBusyError(LiteAgentError):
    """Raised when a session is already running a turn (or is held for maintenance, such as a
    restore or a compaction, or is running in another process or agent, which holds its lease)
    and another operation on it was asked for; nothing was written."""
