"""liteagent.actors — the orchestration layer: pykka actors exchanging msgspec messages.

- :class:`SessionActor` runs one session's turns (:class:`SessionCore`) and background tasks;
- :class:`FileSnapshotActor` snapshots files before tools change them (one per workspace);
- :class:`MaintenanceLockActor` holds sessions for restore and compaction;
- :class:`SessionHost` starts sessions on demand, bounds them (sends beyond the bound wait in
  FIFO order, :class:`HostStats` shows the load) and passivates idle ones.

Live events go through an :class:`EventHub` to :class:`Subscription` iterators.
"""

from ._compactor import CompactorActor, CompactStats, ManualCompaction, RunCompaction
from ._envelope import (
    ActorBase,
    ActorStoppedError,
    ActorTimeoutError,
    Envelope,
    Message,
    ask,
    tell,
)
from ._host import AgentBusyError, HostSaturatedError, HostStats, SessionHost
from ._hub import EventHub, LiveEvent, Missed, Subscription
from ._live import (
    BackgroundTaskFinished,
    CheckpointRestore,
    CompactionProgress,
    ToolCallFinished,
    ToolCallStarted,
    TurnFailed,
    TurnFinished,
)
from ._maintenance import Acquire, IsHeld, MaintenanceLockActor, Release
from ._restore import Restorer, RestoreResult
from ._restore_files import RestoreFailedError
from ._restore_plan import (
    Checkpoint,
    InterruptedRestoreError,
    InvalidCheckpointError,
    RestoreRefusedError,
)
from ._session import BackgroundTask, SessionActor
from ._snapshots import FileSnapshotActor
from ._turn import Middleware, SessionConfig, SessionCore, TurnFailedError, TurnResult

__all__ = [
    "Acquire",
    "ActorBase",
    "ActorStoppedError",
    "ActorTimeoutError",
    "AgentBusyError",
    "BackgroundTask",
    "BackgroundTaskFinished",
    "Checkpoint",
    "CheckpointRestore",
    "CompactStats",
    "CompactionProgress",
    "CompactorActor",
    "Envelope",
    "EventHub",
    "FileSnapshotActor",
    "HostSaturatedError",
    "HostStats",
    "InterruptedRestoreError",
    "InvalidCheckpointError",
    "IsHeld",
    "LiveEvent",
    "MaintenanceLockActor",
    "ManualCompaction",
    "Message",
    "Middleware",
    "Missed",
    "Release",
    "RestoreFailedError",
    "RestoreRefusedError",
    "RestoreResult",
    "Restorer",
    "RunCompaction",
    "SessionActor",
    "SessionConfig",
    "SessionCore",
    "SessionHost",
    "Subscription",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnFailed",
    "TurnFailedError",
    "TurnFinished",
    "TurnResult",
    "ask",
    "tell",
]
