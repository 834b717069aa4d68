"""How actors talk: msgspec-encoded messages with the reply beside the payload.

A message is a frozen, tagged ``msgspec.Struct`` encoded to msgpack, so a receiver can never
mutate the sender's data and every message is loggable. The reply travels beside the encoded
payload as a ``concurrent.futures.Future``: the blocking API waits on ``future.result(timeout)``,
the asyncio API awaits ``asyncio.wrap_future(future)``, and no thread is parked either way.
Objects that cannot be data (a cancel token) also travel beside the payload, never inside it.

Every actor boundary catches ``BaseException``: an escaping ``CancelledError`` or
``KeyboardInterrupt`` would make pykka stop every actor in the process.
"""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
import pykka
import structlog

from liteagent.eventlog import CancelToken, LiteAgentError, OperationCancelledError

__all__ = ["ActorBase", "ActorStoppedError", "Envelope", "Message", "ask", "ask_or_cancel", "tell"]

_log = structlog.get_logger("liteagent.actors")
_ENCODER = msgspec.msgpack.Encoder()
T = TypeVar("T")


class Message(msgspec.Struct, frozen=True, tag_field="t"):
    """Base of every actor message."""


class ActorStoppedError(LiteAgentError):
    """Raised when a message is sent to an actor that has stopped (or fails to arrive)."""


@dataclass
class Envelope:
    """An encoded message, its reply future, and what travels beside it."""

    payload: bytes
    reply: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)
    cancel: CancelToken | None = None


def _envelope(message: Message, cancel: CancelToken | None) -> Envelope:
    return Envelope(_ENCODER.encode(message), cancel=cancel)


def tell(ref: pykka.ActorRef[Any], message: Message, cancel: CancelToken | None = None) -> Envelope:
    """Send ``message``; return its envelope (whose ``reply`` the caller may wait on)."""
    env = _envelope(message, cancel)
    try:
        ref.tell(env)
    except pykka.ActorDeadError as e:
        raise ActorStoppedError(f"the actor {ref.actor_class.__name__} has stopped") from e
    return env


_CANCEL_POLL = 0.05  # seconds between checks of a cancel token while waiting


def ask(
    ref: pykka.ActorRef[Any],
    message: Message,
    *,
    timeout: float | None,
    cancel: CancelToken | None = None,
) -> Any:
    """Send ``message`` and wait up to ``timeout`` seconds for the reply (``None``: no limit,
    only for calls whose own work is bounded, e.g. a turn with its cancel token). The cancel
    token travels with the message; the wait lasts until the actor answers (it may have to
    undo what it did)."""
    env = tell(ref, message, cancel)
    try:
        return env.reply.result(timeout)
    except concurrent.futures.TimeoutError as e:
        env.reply.cancel()
        raise TimeoutError(f"{type(message).__name__} got no reply within {timeout} s") from e


def ask_or_cancel(
    ref: pykka.ActorRef[Any],
    message: Message,
    *,
    timeout: float,
    cancel: CancelToken,
) -> Any:
    """Like :func:`ask`, for work without side effects: the wait also ends when ``cancel``
    fires, raising :class:`OperationCancelledError` at once even if the actor is still working
    (the work stops at its next check of the token, and its late reply is dropped)."""
    env = tell(ref, message, cancel)
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = max(deadline - time.monotonic(), 0.0)
            step = min(_CANCEL_POLL, left)
            try:
                return env.reply.result(step)
            except concurrent.futures.TimeoutError:
                if cancel.cancelled:
                    env.reply.cancel()
                    raise OperationCancelledError(cancel.reason or "cancelled") from None
                if left <= step:
                    raise
    except concurrent.futures.TimeoutError as e:
        env.reply.cancel()
        raise TimeoutError(f"{type(message).__name__} got no reply within {timeout} s") from e


class ActorBase(pykka.ThreadingActor):
    """A pykka actor that decodes envelopes and completes their futures.

    Subclasses set ``decoder`` (a ``msgspec.msgpack.Decoder`` of their message union) and
    implement :meth:`handle`. Daemon threads: a forgotten actor never keeps the process alive
    (``close()`` of the SDK still stops every actor it started).
    """

    use_daemon_thread = True
    decoder: msgspec.msgpack.Decoder[Any]

    def on_receive(self, message: Any) -> Any:
        if not isinstance(message, Envelope):
            return None
        reply = message.reply
        if not reply.set_running_or_notify_cancel():
            return None  # the caller gave up before we started
        try:
            decoded = self.decoder.decode(message.payload)
            reply.set_result(self.handle(decoded, message))
        except BaseException as e:  # noqa: BLE001 -- never let anything escape an actor
            if not isinstance(e, Exception):
                _log.error("actor.base_exception", actor=type(self).__name__, error=repr(e))
                e = ActorStoppedError(f"{type(e).__name__} in {type(self).__name__}")
            reply.set_exception(e)
        return None

    def handle(self, message: Any, envelope: Envelope) -> Any:
        """Handle one decoded message; the return value (or exception) is the reply."""
        raise NotImplementedError
