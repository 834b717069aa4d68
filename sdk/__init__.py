"""liteagent.sdk — the public facade.

- :func:`create_lite_agent` / :func:`create_async_lite_agent` → :class:`LiteAgent` /
  :class:`AsyncLiteAgent`: a coding agent with default tools whose sessions are event-sourced
  logs that survive restarts;
- :func:`create_agent`: the lower-level kernel with explicit tools and model-call middleware;
- :func:`configure_logging`: an opt-in logging setup (the library itself never configures).
"""

from liteagent.actors import (
    ActorStoppedError,
    ActorTimeoutError,
    AgentBusyError,
    BackgroundTask,
    BackgroundTaskFinished,
    Checkpoint,
    CheckpointRestore,
    CompactionProgress,
    CompactStats,
    HostSaturatedError,
    HostStats,
    InterruptedRestoreError,
    InvalidCheckpointError,
    LiveEvent,
    Missed,
    RestoreFailedError,
    RestoreRefusedError,
    RestoreResult,
    Subscription,
    ToolCallFinished,
    ToolCallStarted,
    TurnFailed,
    TurnFailedError,
    TurnFinished,
)
from liteagent.actors._hub import AsyncSubscription

from ._agent import LiteAgent, LiteAgentResult
from ._async_agent import AsyncLiteAgent
from ._errors import AgentClosedError, SessionsDisabledError
from ._factory import create_agent, create_async_lite_agent, create_lite_agent
from ._logging import configure_logging

__all__ = [
    "ActorStoppedError",
    "ActorTimeoutError",
    "AgentBusyError",
    "AgentClosedError",
    "AsyncLiteAgent",
    "AsyncSubscription",
    "BackgroundTask",
    "BackgroundTaskFinished",
    "Checkpoint",
    "CheckpointRestore",
    "CompactStats",
    "CompactionProgress",
    "HostSaturatedError",
    "HostStats",
    "InterruptedRestoreError",
    "InvalidCheckpointError",
    "LiteAgent",
    "LiteAgentResult",
    "LiveEvent",
    "Missed",
    "RestoreFailedError",
    "RestoreRefusedError",
    "RestoreResult",
    "SessionsDisabledError",
    "Subscription",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnFailed",
    "TurnFailedError",
    "TurnFinished",
    "configure_logging",
    "create_agent",
    "create_async_lite_agent",
    "create_lite_agent",
]
