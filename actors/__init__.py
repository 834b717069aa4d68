"""liteagent.actors — the orchestration layer: pykka actors exchanging msgspec messages.

- :class:`SessionActor` runs one session's turns (:class:`SessionCore`) and background tasks;
- :class:`FileSnapshotActor` snapshots files before tools change them (one per workspace);
- :class:`MaintenanceLockActor` holds sessions for restore and compaction;
- :class:`SessionHost` starts sessions on demand, bounds them (sends beyond the bound wait in
  FIFO order, :class:`HostStats` shows the load) and passivates idle ones.

Live events go through an :class:`EventHub` to :class:`Subscription` iterators.
"""

from ._compactor import CompactorActor, ManualCompaction
from ._host import SessionHost
from ._hub import EventHub
from ._maintenance import MaintenanceLockActor
from ._restore import Restorer
from ._snapshots import FileSnapshotActor
from ._turn import SessionConfig

__all__ = [
    "CompactorActor",
    "EventHub",
    "FileSnapshotActor",
    "MaintenanceLockActor",
    "ManualCompaction",
    "Restorer",
    "SessionConfig",
    "SessionHost",
]
