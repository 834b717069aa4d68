"""SessionActor: one per live session, the only writer of its session in this process.

It runs its session's turns one at a time (messages queue in its mailbox), owns the session's
background tasks, and appends their completion when the session is between turns. Its state is
the log: a new actor folds it on its first message, which is how a passivated or crashed
session comes back.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import pykka

from liteagent.eventlog import CancelToken, SessionState
from liteagent.eventlog._logger import get_logger
from liteagent.eventlog.errors import CheckpointConflictError
from liteagent.eventlog.types import BackgroundCompleted, Compaction, TextBlock, UserPrompt
from liteagent.tools import ToolError, ToolOutput

from . import _background as background
from ._background import new_task_id
from ._envelope import ActorBase, ActorMessage, Envelope, ask, tell
from ._errors import AgentBusyError
from ._hub import LiveEvent
from ._lease import session_lease
from ._live import BackgroundTaskFinished
from ._maintenance import IsHeld
from ._turn import SessionConfig, SessionCore
from ._turn_tools import checked_output, describe_error, safe_text

__all__ = [
    "AgentBusyError",
    "BackgroundDone",
    "BackgroundLimit",
    "BackgroundTask",
    "BackgroundTasks",
    "GetState",
    "RecordCompaction",
    "Send",
    "SessionActor",
]

_log = get_logger("liteagent.session")


class Send(ActorMessage, tag="send", frozen=True):
    """Run a user prompt to the end of the model's turn (the cancel token travels beside)."""

    text: str


class GetState(ActorMessage, tag="get_state", frozen=True):
    """Reply with the session's folded state (folding the log first if needed)."""


class RecordCompaction(ActorMessage, tag="record_compaction", frozen=True):
    """Append a compaction record made from the state at ``expected_head`` (the session is held
    for maintenance meanwhile); the view uses it from the next turn on."""

    record: Compaction
    expected_head: int


class BackgroundDone(ActorMessage, tag="background_done", frozen=True):
    """A background task of this session finished with ``content``."""

    task_id: str
    description: str
    content: str
    is_error: bool


SessionMessage = Send | GetState | BackgroundDone | RecordCompaction


class BackgroundTask(msgspec.Struct, frozen=True):
    """A running background task: its id, what it does, and when it started."""

    task_id: str
    session_id: str
    description: str


_LOCK_TIMEOUT = 30.0
_BACKGROUND_SUMMARY = 4000
_BACKGROUND_RETRY_EVERY = 1.0  # seconds between tries while another process holds the lease
_BACKGROUND_RETRY_FOR = 3600.0  # then the result is given up (and logged)
_BACKGROUND_RECORD_TIMEOUT = 3600.0  # the session may be running a long turn meanwhile


class BackgroundLimit:
    """The bound on the background-task threads of one agent (every session's together): each
    task holds one of ``limit`` places from before its thread starts until the thread ends."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        """How many task threads hold a place now."""
        return self._held

    def take(self) -> None:
        """Take a place, or raise :class:`~liteagent.tools.ToolError` (the tool call's result
        then tells the model) when all of them are held."""
        with self._lock:
            if self._held < self.limit:
                self._held += 1
                return
        raise ToolError(
            f"too many background tasks: {self.limit} are running (the agent's "
            "max_background_tasks); wait for one to finish (its result arrives as a message) "
            "or run the command in the foreground"
        )

    def give_back(self) -> None:
        """Give a place back (a task's thread ended, or never started)."""
        with self._lock:
            self._held -= 1


class BackgroundTasks:
    """The running background tasks of one session; shared by its actor and the host, so it
    can be read from any thread. ``on_removed`` is called (on the remover's thread) after a
    finished task is forgotten: the host, which keeps a session with tasks live, looks again
    at its queue then. ``limit`` bounds the task threads of the whole agent."""

    def __init__(
        self,
        on_removed: Callable[[], None] | None = None,
        limit: BackgroundLimit | None = None,
    ) -> None:
        self._tasks: dict[str, tuple[BackgroundTask, CancelToken]] = {}
        self._lock = threading.Lock()
        self._on_removed = on_removed
        self._limit = limit
        # one future per task thread still running (its result delivered or not): what the
        # host's close waits for, so that no task thread outlives the agent
        self._threads: set[concurrent.futures.Future[None]] = set()

    def thread_started(self) -> concurrent.futures.Future[None]:
        """Register a task's thread before it starts; :meth:`thread_ended` with the returned
        future ends it. Raises :class:`~liteagent.tools.ToolError` when the agent's bound on
        task threads is reached (nothing registered)."""
        if self._limit is not None:
            self._limit.take()
        ended: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._lock:
            self._threads.add(ended)
        return ended

    def thread_ended(self, ended: concurrent.futures.Future[None]) -> None:
        """A task's thread is done (its last act)."""
        with self._lock:
            self._threads.discard(ended)
        if self._limit is not None:
            self._limit.give_back()
        ended.set_result(None)

    def threads(self) -> list[concurrent.futures.Future[None]]:
        """The futures of the task threads still running."""
        with self._lock:
            return list(self._threads)

    def add(self, task: BackgroundTask, token: CancelToken) -> None:
        """Record a started task."""
        with self._lock:
            self._tasks[task.task_id] = (task, token)

    def remove(self, task_id: str) -> None:
        """Forget a finished task."""
        with self._lock:
            removed = self._tasks.pop(task_id, None) is not None
        if removed and self._on_removed is not None:
            self._on_removed()

    def running(self) -> list[BackgroundTask]:
        """The tasks still running."""
        with self._lock:
            return [t for t, _ in self._tasks.values()]

    def cancel_all(self, reason: str) -> None:
        """Cancel every running task."""
        with self._lock:
            tokens = [c for _, c in self._tasks.values()]
        for token in tokens:
            token.cancel(reason)


class SessionActor(ActorBase):
    """Runs one session's turns and owns its background tasks."""

    decoder = msgspec.msgpack.Decoder(SessionMessage)

    def __init__(
        self,
        session_id: str,
        config: SessionConfig,
        tasks: BackgroundTasks,
        lock_ref: pykka.ActorRef[Any] | None = None,
    ) -> None:
        super().__init__()
        self.core = SessionCore(session_id, config)
        self.session_id = session_id
        self.tasks = tasks
        self.lock_ref = lock_ref

    # -- messages ---------------------------------------------------------------------------------

    def handle(self, message: Any, envelope: Envelope) -> Any:
        if isinstance(message, Send):
            if self.lock_ref is not None:
                holder = ask(self.lock_ref, IsHeld(self.session_id), timeout=_LOCK_TIMEOUT)
                if holder is not None:
                    raise AgentBusyError(f"session {self.session_id!r} is held for {holder}")
            cancel = envelope.cancel or CancelToken()
            try:
                with self._leased("a turn"):
                    return self.core.send(message.text, cancel, self._start_background)
            finally:
                self._turn_ended()
        if isinstance(message, GetState):
            self.core.refresh()
            if not self.core.loaded:
                self.core.load()
            state: SessionState = self.core.state
            return state
        if isinstance(message, RecordCompaction):
            if not self.core.loaded:
                self.core.load()
            if self.core.state.head != message.expected_head:
                raise CheckpointConflictError(
                    self.session_id,
                    message.expected_head,
                    self.core.state.head,
                    "the session moved on during the compaction",
                )
            self.core.lease = envelope.lease  # the compaction's: the record is fenced by it
            try:
                self.core.append([message.record])
            finally:
                self.core.lease = None
            return None
        assert isinstance(message, BackgroundDone)
        self._finish_background(message)
        return None

    def _turn_ended(self) -> None:
        """Tell the agent where the send left the log (see ``SessionConfig.on_turn_end``)."""
        report = self.core.config.on_turn_end
        if report is not None:
            core = self.core
            report(self.session_id, (core.state.head, core.generation) if core.loaded else None)

    @contextmanager
    def _leased(self, purpose: str) -> Iterator[None]:
        """Hold the session's lease (refused with AgentBusyError when another process or agent
        holds it) and bring the state up to date with the log while the block runs."""
        with session_lease(self.core.checkpointer, self.session_id, purpose) as lease:
            self.core.lease = lease
            try:
                self.core.refresh()
                yield
            finally:
                self.core.lease = None

    def _finish_background(self, done: BackgroundDone) -> None:
        """Record a finished background task; while another process holds the session's lease
        this raises AgentBusyError and the task stays listed (its thread tries again)."""
        try:
            with self._leased("recording a background result"):
                self._record_background(done)
        except AgentBusyError:
            raise
        except BaseException:
            self.tasks.remove(done.task_id)
            raise
        self.tasks.remove(done.task_id)

    def _record_background(self, done: BackgroundDone) -> None:
        if not self.core.loaded:
            self.core.load()
        summary = safe_text(done.content[:_BACKGROUND_SUMMARY])  # what the log can store
        status = "failed" if done.is_error else "finished"
        notice = safe_text(
            f"[background task {done.task_id} ({done.description}) {status}]\n{summary}"
        )
        try:
            self.core.append(
                [
                    *self.core.interrupted_turn(),  # a turn another process was killed in
                    *self.core.lost_background(),  # tasks whose process is gone
                    BackgroundCompleted(
                        task_id=done.task_id, ok=not done.is_error, summary=summary
                    ),
                    UserPrompt(content=(TextBlock(notice),), origin="background"),
                ]
            )
        except Exception as e:
            _log.error(
                "background.not_recorded",
                session_id=self.session_id,
                task_id=done.task_id,
                error=repr(e),
            )
            raise
        self.core.config.hub.publish(
            LiveEvent(self.session_id, BackgroundTaskFinished(done.task_id, done.is_error))
        )

    def _start_background(self, description: str, work: Callable[[CancelToken], ToolOutput]) -> str:
        task_id = new_task_id()
        token = CancelToken()
        task = BackgroundTask(task_id, self.session_id, description)
        ref = self.actor_ref

        def run() -> None:
            try:
                try:
                    output = checked_output(work(token))  # text the log can store
                except BaseException as e:  # noqa: BLE001 -- reported as the task's result
                    output = ToolOutput(safe_text(describe_error(e)), is_error=True)
                done = BackgroundDone(
                    task_id, safe_text(description), output.content, output.is_error
                )
                error = _deliver(ref, done, token)
                if error is not None:
                    _log.warning(
                        "background.result_lost",
                        session_id=self.session_id,
                        task_id=task_id,
                        error=repr(error),
                    )
            finally:
                background.discard(task_id)
                tasks.thread_ended(ended)

        tasks = self.tasks
        ended = tasks.thread_started()  # first: at the agent's bound it raises, nothing added
        tasks.add(task, token)
        background.register(task_id)
        try:
            threading.Thread(target=run, name=f"liteagent-{task_id}", daemon=True).start()
        except BaseException:
            background.discard(task_id)
            tasks.remove(task_id)
            tasks.thread_ended(ended)
            raise
        return task_id


def _deliver(
    ref: pykka.ActorRef[Any], done: BackgroundDone, token: CancelToken
) -> BaseException | None:
    """Have the session record ``done``; return why it could not (``None`` once it did).

    While another process holds the session's lease the session refuses with AgentBusyError;
    this tries again every second for up to an hour, or until the task is cancelled (the agent
    is closing)."""
    deadline = time.monotonic() + _BACKGROUND_RETRY_FOR
    while True:
        try:
            tell(ref, done).reply.result(_BACKGROUND_RECORD_TIMEOUT)
        except AgentBusyError as e:
            if time.monotonic() >= deadline or token.wait(_BACKGROUND_RETRY_EVERY):
                return e
        except BaseException as e:  # noqa: BLE001 -- the session is gone or failing
            return e
        else:
            return None
