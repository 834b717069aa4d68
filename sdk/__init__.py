"""liteagent.sdk — the public facade.

- :func:`create_lite_agent` / :func:`create_async_lite_agent` → :class:`LiteAgent` /
  :class:`AsyncLiteAgent`: a coding agent with default tools whose sessions are event-sourced
  logs that survive restarts;
- :func:`create_agent`: the lower-level kernel with explicit tools and model-call middleware;
- :func:`configure_logging`: an opt-in logging setup (the library itself never configures).
"""

from liteagent.actors._branches import Branch
from liteagent.actors._compactor import CompactionFailedError, CompactStats
from liteagent.actors._envelope import ActorStoppedError, ActorTimeoutError
from liteagent.actors._host import AgentBusyError, HostSaturatedError, HostStats
from liteagent.actors._hub import AsyncSubscription, LiveEvent, Missed, Subscription
from liteagent.actors._ledger import SideEffect
from liteagent.actors._live import (
    BackgroundTaskFinished,
    CheckpointRestore,
    CompactionProgress,
    ToolCallFinished,
    ToolCallStarted,
    TurnFailed,
    TurnFinished,
)
from liteagent.actors._preview import FileChange, RestorePreview
from liteagent.actors._restore import RestoreResult
from liteagent.actors._restore_files import RestoreFailedError
from liteagent.actors._restore_plan import (
    Checkpoint,
    InterruptedRestoreError,
    InvalidCheckpointError,
    NoBranchError,
    RestoreRefusedError,
)
from liteagent.actors._session import BackgroundTask
from liteagent.actors._turn import Middleware, TurnFailedError
from liteagent.context._engine_options import ContextBudgetError
from liteagent.eventlog._cancel import CancelToken
from liteagent.eventlog._errors import (
    CheckpointConflictError,
    InvalidArgumentError,
    LiteAgentError,
    OperationCancelledError,
)
from liteagent.providers._errors import ProviderError

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
    "Branch",
    "CancelToken",
    "Checkpoint",
    "CheckpointConflictError",
    "CheckpointRestore",
    "CompactStats",
    "CompactionFailedError",
    "CompactionProgress",
    "ContextBudgetError",
    "FileChange",
    "HostSaturatedError",
    "HostStats",
    "InterruptedRestoreError",
    "InvalidArgumentError",
    "InvalidCheckpointError",
    "LiteAgent",
    "LiteAgentError",
    "LiteAgentResult",
    "LiveEvent",
    "Middleware",
    "Missed",
    "NoBranchError",
    "OperationCancelledError",
    "ProviderError",
    "RestoreFailedError",
    "RestorePreview",
    "RestoreRefusedError",
    "RestoreResult",
    "SessionsDisabledError",
    "SideEffect",
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
