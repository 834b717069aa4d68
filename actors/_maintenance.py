"""MaintenanceLockActor: compaction and restore hold a session's maintenance lock; no run starts
while it is held, and it is only granted while the session is idle."""

from __future__ import annotations

from typing import Any

import msgspec

from ._envelope import ActorBase, Envelope, Message

__all__ = ["Acquire", "IsHeld", "MaintenanceLockActor", "Release"]


class Acquire(Message, tag="acquire", frozen=True):
    """Take ``session_id``'s lock for ``holder`` (a purpose such as "restore"); replies
    whether it was granted (False: someone else holds it)."""

    session_id: str
    holder: str


class Release(Message, tag="release", frozen=True):
    """Give the lock back (a no-op when ``holder`` does not hold it)."""

    session_id: str
    holder: str


class IsHeld(Message, tag="is_held", frozen=True):
    """Reply with the holder of ``session_id``'s lock, or None."""

    session_id: str


LockMessage = Acquire | Release | IsHeld


class MaintenanceLockActor(ActorBase):
    """The maintenance locks of every session of one agent."""

    decoder = msgspec.msgpack.Decoder(LockMessage)

    def __init__(self) -> None:
        super().__init__()
        self.held: dict[str, str] = {}

    def handle(self, message: Any, envelope: Envelope) -> Any:  # noqa: ARG002 -- no side data
        if isinstance(message, Acquire):
            if message.session_id in self.held:
                return False
            self.held[message.session_id] = message.holder
            return True
        if isinstance(message, Release):
            if self.held.get(message.session_id) == message.holder:
                del self.held[message.session_id]
            return None
        assert isinstance(message, IsHeld)
        return self.held.get(message.session_id)
