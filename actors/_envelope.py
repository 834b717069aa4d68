"""How actors talk: msgspec-encoded messages with the reply beside the payload.

A message is a frozen, tagged ``msgspec.Struct`` encoded to msgpack, so a receiver can never
mutate the sender's data and every message is loggable. The reply travels beside the encoded
payload as a ``concurrent.futures.Future``: the blocking API waits on ``future.result(timeout)``,
the asyncio API awaits ``asyncio.wrap_future(future)``, and no thread is parked either way.
Objects that cannot be data (a cancel token) also travel beside the payload, never inside it.

Every actor boundary catches ``BaseException``: an escaping ``CancelledError`` or
``KeyboardInterrupt`` would make pykka stop every actor in the process.

No message is dropped silently: pykka discards a ``tell`` still queued when its actor stops, so
an :class:`ActorBase` fails the envelopes left in its inbox with :class:`ActorStoppedError` when
it stops, and :func:`tell` fails its own envelope when the actor stopped while it was being
queued.

A :class:`Dispatcher` is the lighter form for an owner of shared state that sends no messages of
its own (the session host): one thread running posted commands in order, with a clock.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
import pykka

from liteagent.eventlog import CancelToken, Lease
from liteagent.eventlog._logger import get_logger
from liteagent.eventlog.errors import InvalidArgumentError, LiteAgentError, OperationCancelledError

from ._pool import ThreadPool
from ._reply import Reply

__all__ = [
    "ActorBase",
    "ActorMessage",
    "ActorStoppedError",
    "ActorTimeoutError",
    "Dispatcher",
    "Envelope",
    "ask",
    "ask_or_cancel",
    "complete",
    "fail",
    "start_actor",
    "tell",
]

_log = get_logger("liteagent.actors")
_ENCODER = msgspec.msgpack.Encoder()
T = TypeVar("T")
A = TypeVar("A", bound="ActorBase")


class ActorMessage(msgspec.Struct, frozen=True, tag_field="t"):
    """Base of every actor message."""


class ActorStoppedError(LiteAgentError):
    """Raised when a message is sent to an actor that has stopped, or the actor stopped before
    handling it."""


class ActorTimeoutError(LiteAgentError, TimeoutError):
    """Raised when an actor does not reply within the time allowed."""


@dataclass
class Envelope:
    """An encoded message, its reply future, and what travels beside it."""

    payload: bytes
    reply: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)
    cancel: CancelToken | None = None
    lease: Lease | None = None  # the session lease the sender holds for the work it asks


def _envelope(message: ActorMessage, cancel: CancelToken | None, lease: Lease | None) -> Envelope:
    try:
        payload = _ENCODER.encode(message)
    except (TypeError, ValueError, OverflowError) as e:  # msgspec.EncodeError is a ValueError
        raise InvalidArgumentError(
            f"{type(message).__name__} cannot be sent to the actor: {e}"
        ) from e
    return Envelope(payload, cancel=cancel, lease=lease)


def tell(
    ref: pykka.ActorRef[Any],
    message: ActorMessage,
    cancel: CancelToken | None = None,
    lease: Lease | None = None,
) -> Envelope:
    """Send ``message``; return its envelope (whose ``reply`` the caller may wait on)."""
    env = _envelope(message, cancel, lease)
    try:
        ref.tell(env)
    except pykka.ActorDeadError as e:
        raise ActorStoppedError(f"the actor {ref.actor_class.__name__} has stopped") from e
    if not ref.is_alive():  # it stopped while we queued: its inbox may have been drained already
        _fail_unhandled(env, ref.actor_class.__name__)
    return env


def _fail_unhandled(env: Envelope, actor: str) -> None:
    """Fail ``env`` with ActorStoppedError unless its handling started (or it was cancelled)."""
    try:
        if env.reply.set_running_or_notify_cancel():
            env.reply.set_exception(
                ActorStoppedError(f"the actor {actor} stopped before handling the message")
            )
    except RuntimeError:  # running or done: the actor took it
        pass


_CANCEL_POLL = 0.05  # seconds between checks of a cancel token while waiting


def ask(
    ref: pykka.ActorRef[Any],
    message: ActorMessage,
    *,
    timeout: float | None,
    cancel: CancelToken | None = None,
    lease: Lease | None = None,
) -> Any:
    """Send ``message`` and wait up to ``timeout`` seconds for the reply (``None``: no limit,
    only for calls whose own work is bounded, e.g. a turn with its cancel token). The cancel
    token (and the sender's session lease) travel with the message; the wait lasts until the
    actor answers (it may have to undo what it did)."""
    env = tell(ref, message, cancel, lease)
    try:
        return env.reply.result(timeout)
    except concurrent.futures.TimeoutError as e:
        env.reply.cancel()
        raise ActorTimeoutError(f"{type(message).__name__} got no reply within {timeout} s") from e


def ask_or_cancel(
    ref: pykka.ActorRef[Any],
    message: ActorMessage,
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
        raise ActorTimeoutError(f"{type(message).__name__} got no reply within {timeout} s") from e


_starting = threading.local()


def start_actor(
    cls: type[A], *args: Any, on_stopped: Callable[[], None], pool: ThreadPool | None = None
) -> pykka.ActorRef[A]:
    """``cls.start(*args)``, calling ``on_stopped()`` in the actor's thread once it has stopped
    (after failing what was left in its inbox); its loop runs on a thread of ``pool`` when one
    is given. When its thread cannot start (``RuntimeError``: too many threads) the half-started
    actor is unregistered before the error is raised, so ``stop_all`` never waits on it."""
    _starting.on_stopped = on_stopped
    _starting.pool = pool
    _starting.ref = None
    try:
        return cls.start(*args)
    except BaseException:
        ref: pykka.ActorRef[A] | None = _starting.ref
        if ref is not None:
            pykka.ActorRegistry.unregister(ref)
            ref.actor_stopped.set()
        raise
    finally:
        _starting.on_stopped = None
        _starting.pool = None
        _starting.ref = None


class ActorBase(pykka.ThreadingActor):
    """A pykka actor that decodes envelopes and completes their futures.

    Subclasses set ``decoder`` (a ``msgspec.msgpack.Decoder`` of their message union) and
    implement :meth:`handle`. Daemon threads: a forgotten actor never keeps the process alive
    (``close()`` of the SDK still stops every actor it started).
    """

    use_daemon_thread = True
    decoder: msgspec.msgpack.Decoder[Any]

    @staticmethod
    def _create_actor_inbox() -> Any:
        """A ``queue.SimpleQueue`` (pykka's ``queue.Queue`` costs three conditions per actor,
        some twenty objects for the cyclic collector to scan, and is slower to pass through)."""
        return queue.SimpleQueue()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_stopped: Callable[[], None] | None = getattr(_starting, "on_stopped", None)
        self._pool: ThreadPool | None = None
        if self._on_stopped is not None:  # started by start_actor
            self._pool = _starting.pool
            _starting.on_stopped = None  # an actor started inside this constructor gets none
            _starting.pool = None
            _starting.ref = self.actor_ref

    def _start_actor_loop(self) -> None:
        """Run the actor's loop on a thread of its pool (when it has one)."""
        if self._pool is None:
            super()._start_actor_loop()
        else:
            self._pool.run(self._actor_loop)

    def on_stop(self) -> None:
        self._wind_down()

    def on_failure(self, *_exc_info: Any) -> None:
        self._wind_down()

    def _wind_down(self) -> None:
        """Fail the envelopes still in the inbox (pykka would drop them), then report the stop."""
        keep: list[Any] = []
        while not self.actor_inbox.empty():  # this thread is the only reader: get() won't block
            item = self.actor_inbox.get()
            message = getattr(item, "message", None)
            if isinstance(message, Envelope):
                _fail_unhandled(message, type(self).__name__)
            else:
                keep.append(item)  # pykka's own (a stop, an ask): its teardown answers them
        for item in keep:
            self.actor_inbox.put(item)
        if self._on_stopped is not None:
            try:
                self._on_stopped()
            except Exception as e:  # noqa: BLE001 -- a stopping actor must not fail loudly
                _log.error("actor.on_stopped_failed", actor=type(self).__name__, error=repr(e))

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


# -- futures and a dispatcher thread ---------------------------------------------------------------


def fail(future: concurrent.futures.Future[Any] | Reply, error: BaseException) -> None:
    """Fail ``future`` unless it is already done (e.g. cancelled by its caller)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        future.set_exception(error)


def complete(
    target: concurrent.futures.Future[Any] | Reply, source: concurrent.futures.Future[Any]
) -> None:
    """Give ``target`` the outcome of the done ``source`` (unless ``target`` is done)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        if source.cancelled():
            target.cancel()
        elif (error := source.exception()) is not None:
            target.set_exception(error)
        else:
            target.set_result(source.result())


_MAX_SLEEP = 60.0  # the dispatcher's longest wait for a command
_BATCH = 256  # commands run between two calls of the ``after`` hooks


class Dispatcher:
    """One daemon thread that runs posted commands one at a time, in the order posted, so the
    state only they touch needs no lock. After each batch of commands it runs the ``after``
    hooks, then waits for the next command at most ``sleep()`` seconds (its clock).

    A command that raises is logged and the thread goes on. After :meth:`stop`, what was
    already posted still runs, and :meth:`post` raises :class:`ActorStoppedError`.
    """

    def __init__(
        self,
        name: str,
        *,
        after: Sequence[Callable[[], Any]] = (),
        sleep: Callable[[], float] = lambda: _MAX_SLEEP,
    ) -> None:
        self._after = tuple(after)
        self._sleep = sleep
        self._inbox: queue.SimpleQueue[Callable[[], Any] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # held only to check _exited and put
        self._exited = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def post(self, command: Callable[[], Any]) -> None:
        """Run ``command`` on the thread (never blocks)."""
        with self._lock:
            if self._exited:
                raise ActorStoppedError("the dispatcher has stopped")
            self._inbox.put(command)

    def post_quietly(self, command: Callable[[], Any]) -> bool:
        """:meth:`post` from a callback: once stopped there is nothing left to do (returns
        whether ``command`` was posted)."""
        try:
            self.post(command)
        except ActorStoppedError:
            return False
        return True

    def query(self, fn: Callable[[], T], timeout: float) -> T:
        """Run ``fn`` on the thread and wait for its result (or exception)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as e:  # noqa: BLE001 -- handed to the waiting caller
                future.set_exception(e)

        self.post(run)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError as e:
            raise ActorTimeoutError(f"{self._thread.name} did not answer in {timeout} s") from e

    def stop(self, timeout: float) -> None:
        """Run what was posted, then end the thread (waiting at most ``timeout`` seconds)."""
        with self._lock:
            if not self._exited:
                self._inbox.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        exiting = False
        while not exiting:
            commands: list[Callable[[], Any] | None] = []
            try:
                commands.append(self._inbox.get(timeout=min(max(self._sleep(), 0.0), _MAX_SLEEP)))
                while len(commands) < _BATCH:
                    commands.append(self._inbox.get_nowait())
            except queue.Empty:
                pass
            for command in commands:
                if command is None:
                    exiting = True
                else:
                    self._do(command)
            for hook in self._after:
                self._do(hook)
        with self._lock:
            self._exited = True
        while True:  # what was posted before the door closed still runs
            try:
                command = self._inbox.get_nowait()
            except queue.Empty:
                break
            if command is not None:
                self._do(command)
        for hook in self._after:
            self._do(hook)

    def _do(self, command: Callable[[], Any]) -> None:
        try:
            command()
        except BaseException as e:  # noqa: BLE001 -- the dispatcher outlives any one command
            _log.error("dispatcher.command_failed", thread=self._thread.name, error=repr(e))
