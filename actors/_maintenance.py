"""MaintenanceLockActor: compaction and restore hold a session's maintenance lock; no run starts
while it is held, and it is only granted while the session is idle."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import msgspec
import pykka

from ._envelope import ActorBase, ActorMessage, ActorStoppedError, Envelope, ask
from ._errors import AgentBusyError

__all__ = ["Acquire", "IsHeld", "MaintenanceLockActor", "Release", "held"]


class Acquire(ActorMessage, tag="acquire", frozen=True):
    """Take ``session_id``'s lock for ``holder`` (a purpose such as "restore"), as the
    acquisition ``token``; replies whether it was granted (False: someone else holds it)."""

    session_id: str
    holder: str
    token: str = ""


class Release(ActorMessage, tag="release", frozen=True):
    """Give the lock back (a no-op unless the acquisition ``token`` holds it)."""

    session_id: str
    holder: str
    token: str = ""


class IsHeld(ActorMessage, tag="is_held", frozen=True):
    """Reply with the holder of ``session_id``'s lock, or None."""

    session_id: str


LockMessage = Acquire | Release | IsHeld

_LOCK_TIMEOUT = 60.0


@contextmanager
def held(
    lock_ref: pykka.ActorRef[Any],
    session_id: str,
    purpose: str,
    is_busy: Callable[[str], bool],
) -> Iterator[None]:
    """Hold ``session_id``'s maintenance lock for ``purpose`` while the block runs.

    Raises :class:`AgentBusyError` when the session runs a turn or a background task (checked
    again once the lock is held, for a turn that started just before) or someone else holds it.
    """

    if is_busy(session_id):
        raise AgentBusyError(f"session {session_id!r} is running a turn or background task")
    token = secrets.token_hex(8)
    granted: bool | None = None  # None: no answer came (an interrupt while waiting for it)
    try:
        granted = bool(ask(lock_ref, Acquire(session_id, purpose, token), timeout=_LOCK_TIMEOUT))
        if not granted:
            raise AgentBusyError(f"session {session_id!r} is held for maintenance")
        if is_busy(session_id):
            raise AgentBusyError(f"session {session_id!r} is running a turn")
        yield
    finally:
        # Given back also when the answer never came (a Ctrl-C while waiting: the grant may
        # still be made, and the release, sent after it, undoes it). A lock actor that stopped
        # (its agent closed) took every lock with it: nothing to give back, and the block's own
        # outcome is the one to report.
        if granted is not False:
            with suppress(ActorStoppedError):
                ask(lock_ref, Release(session_id, purpose, token), timeout=_LOCK_TIMEOUT)


class MaintenanceLockActor(ActorBase):
    """The maintenance locks of every session of one agent. ``on_change(session_id, held)`` is
    told when a lock is granted (before the grant is answered) and when it is given back (the
    session host keeps held sessions from being passivated)."""

    decoder = msgspec.msgpack.Decoder(LockMessage)

    def __init__(self, on_change: Callable[[str, bool], None] | None = None) -> None:
        super().__init__()
        self.held: dict[str, str] = {}
        self.tokens: dict[str, str] = {}  # the token of each held lock's acquisition
        self.on_change = on_change

    def handle(self, message: Any, envelope: Envelope) -> Any:  # noqa: ARG002 -- no side data
        if isinstance(message, Acquire):
            if message.session_id in self.held:
                return False
            self.held[message.session_id] = message.holder
            self.tokens[message.session_id] = message.token
            if self.on_change is not None:
                self.on_change(message.session_id, True)
            return True
        if isinstance(message, Release):
            sid = message.session_id
            if self.held.get(sid) == message.holder and self.tokens.get(sid) == message.token:
                del self.held[sid], self.tokens[sid]
                if self.on_change is not None:
                    self.on_change(message.session_id, False)
            return None
        assert isinstance(message, IsHeld)
        return self.held.get(message.session_id)
