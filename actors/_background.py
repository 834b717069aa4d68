"""Background tasks across agents and processes: their ids, the record of a start, and which
started tasks will never report.

A tool call that starts a background task records :class:`BackgroundStarted` (the task id and
the process running it) with the call's result; the task's end records
:class:`BackgroundCompleted`. The fold keeps the tasks started and not ended
(``SessionState.background_open``). A task's process reports its end; when that process is gone
(its agent closed, it was killed, the machine restarted) nothing ever will, and the model would
wait for a result that never comes. So before a session's next turn (or background record), a
task still open is closed as lost when it was started

- by this process and no longer runs here (the set of tasks running here is process-wide, so
  an agent does not close the running task of another agent of the same process), or
- by a process of this host that is gone (the check the session leases use: pid, boot, pid
  namespace and start time).

A task started on another host that is still open is left open: nothing here can tell whether
it still runs. Task ids are random, so two processes never start tasks of one id in a session.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading

from liteagent.eventlog import SessionState
from liteagent.eventlog._liveness import holder_gone, started_self
from liteagent.eventlog.types import (
    BackgroundCompleted,
    BackgroundStarted,
    Event,
    TextBlock,
    UserPrompt,
)

from ._turn_tools import safe_text

__all__ = [
    "DESCRIPTION_CHARS",
    "discard",
    "lost",
    "lost_records",
    "new_task_id",
    "register",
    "started",
]

DESCRIPTION_CHARS = 200
_running: set[str] = set()
_lock = threading.Lock()


def new_task_id() -> str:
    """A task id no other task (of any process) is likely to have: ``bg-`` and 8 hex digits."""
    return f"bg-{secrets.token_hex(4)}"


def register(task_id: str) -> None:
    """Note that ``task_id`` runs in this process (before its thread starts)."""
    with _lock:
        _running.add(task_id)


def discard(task_id: str) -> None:
    """Note that ``task_id`` no longer runs here (its end recorded, or given up)."""
    with _lock:
        _running.discard(task_id)


def started(task_id: str, tool_call_id: str, description: str) -> BackgroundStarted:
    """The record of a task this process starts for the tool call ``tool_call_id`` (its
    description as the log can store it, cut to :data:`DESCRIPTION_CHARS`)."""
    return BackgroundStarted(
        task_id=task_id,
        tool_call_id=tool_call_id,
        description=safe_text(description)[:DESCRIPTION_CHARS],
        pid=os.getpid(),
        host=socket.gethostname(),
        process=started_self(),
    )


def lost(state: SessionState) -> list[BackgroundStarted]:
    """The tasks open in ``state`` that will never report (see the module)."""
    if not state.background_open:
        return []
    me = (os.getpid(), socket.gethostname(), started_self())
    with _lock:
        running = set(_running)
    return [
        task
        for task in state.background_open
        if ((task.pid, task.host, task.process) == me and task.task_id not in running)
        or holder_gone(task.pid, task.host, task.process)
    ]


def lost_records(tasks: list[BackgroundStarted], why: str) -> list[Event]:
    """What closes ``tasks``: a failed end for each and one notice telling the model (as a
    background notice, between turns), ``why`` saying what became of them."""
    if not tasks:
        return []
    ends: list[Event] = [
        BackgroundCompleted(task_id=t.task_id, ok=False, summary=why) for t in tasks
    ]
    lines = [f"[background task {t.task_id} ({t.description}) lost: {why}]" for t in tasks]
    return [*ends, UserPrompt(content=(TextBlock("\n".join(lines)),), origin="background")]
