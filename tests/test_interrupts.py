"""A Ctrl-C (``KeyboardInterrupt``) landing in the middle of the library's work on the caller's
thread (the blocking API runs deletes, compactions, restores and lease releases there) leaves
nothing behind: no SQLite transaction holding the database's write lock, no file-log handle
naming a descriptor that was closed (whose number the next log opened is given), no maintenance
lock that makes the session "held for maintenance" until the agent is closed.

Each test makes the interrupt land at one exact point: a real SIGINT raised from a profile hook
or a wrapper, delivered (as a real Ctrl-C is) at the next bytecode boundary.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import apsw
import pytest
from _restore_model import reply

from liteagent.actors import _maintenance
from liteagent.actors._maintenance import Acquire
from liteagent.eventlog import _file, file_checkpointer, sqlite_checkpointer
from liteagent.eventlog._sqlite_commit import (
    Item,
    WriteInterruptedError,
    interrupted,
    outcome,
    unsettled,
    waiter,
)
from liteagent.eventlog.types import TextBlock, UserPrompt
from liteagent.providers import scripted
from liteagent.sdk import create_lite_agent


def _prompt(text: str) -> UserPrompt:
    return UserPrompt(content=(TextBlock(text),))


def _texts(cp: Any, session_id: str) -> list[str]:
    return [e.body.content[0].text for e in cp.read(session_id)]


def test_an_interrupt_inside_a_sqlite_transaction_rolls_it_back(tmp_path: Path) -> None:
    """Ctrl-C right after the writer's ``BEGIN IMMEDIATE``: the transaction is rolled back.
    It stayed open, holding the write lock: every later write of the process failed
    ("cannot start a transaction within a transaction") and other processes could not
    write at all."""
    db = tmp_path / "log.db"
    with sqlite_checkpointer(db) as cp:
        cp.append("a", [_prompt("a1")])
        armed = [True]

        def hook(frame: Any, event: str, arg: Any) -> None:
            if (
                armed[0]
                and event == "c_return"
                and frame.f_code.co_name == "_lone"
                and getattr(arg, "__name__", "") == "execute"
            ):
                armed[0] = False
                signal.raise_signal(signal.SIGINT)  # lands after BEGIN IMMEDIATE returned

        sys.setprofile(hook)
        try:
            with pytest.raises(KeyboardInterrupt):
                cp.append("a", [_prompt("a2")])
        finally:
            sys.setprofile(None)
        assert not armed[0]
        assert ["a1"] == _texts(cp, "a")
        other = apsw.Connection(str(db))
        try:
            other.execute("BEGIN IMMEDIATE")  # the write lock is free (no busy wait set)
            other.execute("ROLLBACK")
        finally:
            other.close()
        assert 2 == cp.append("a", [_prompt("a2")])
        assert 1 == cp.append("b", [_prompt("b1")])


def test_an_interrupt_while_a_file_log_is_closed_never_writes_into_another_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C just after a log's descriptor was closed (a delete): the handle no longer
    names it. It did, and the number, given to the next log opened, was then locked, written
    and closed as this session's: another session's event landed in this one's log."""
    cp = file_checkpointer(tmp_path / "store")
    try:
        cp.append("a", [_prompt("a1")])
        real = _file.close_unlocked
        armed = [True]

        def interrupted_close(fd: int) -> None:
            real(fd)
            if armed[0]:
                armed[0] = False
                signal.raise_signal(signal.SIGINT)

        monkeypatch.setattr(_file, "close_unlocked", interrupted_close)
        with pytest.raises(KeyboardInterrupt):
            cp.delete("a")
        monkeypatch.setattr(_file, "close_unlocked", real)
        cp.append("b", [_prompt("b1")])  # may be given the number a's log had
        cp.append("a", [_prompt("a-again")])
        cp.append("b", [_prompt("b2")])
        assert (["a-again"], ["b1", "b2"]) == (_texts(cp, "a"), _texts(cp, "b"))
    finally:
        cp.close()
    with file_checkpointer(tmp_path / "store") as again:
        assert (["a-again"], ["b1", "b2"]) == (_texts(again, "a"), _texts(again, "b"))


@pytest.mark.parametrize("operation", ["compact", "restore"])
def test_an_interrupt_as_the_maintenance_lock_is_granted_frees_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, operation: str
) -> None:
    """Ctrl-C as the maintenance lock's grant comes back to a blocking compact or restore:
    the lock is given back. It was kept, and every later send, compaction and restore of the
    session was refused ("held for maintenance") until the agent was closed."""
    agent = create_lite_agent(
        model=scripted([reply("one"), reply("two"), reply("three")]),
        model_name="m",
        workdir=tmp_path,
        checkpointer=sqlite_checkpointer(tmp_path / "log.db"),
        context=False,
    )
    with agent:
        agent.send("first", session_id="s")
        agent.send("second", session_id="s")
        real_ask = _maintenance.ask

        def ask(ref: Any, message: Any, **kw: Any) -> Any:
            result = real_ask(ref, message, **kw)
            if isinstance(message, Acquire):
                signal.raise_signal(signal.SIGINT)
            return result

        seq = agent.list_checkpoints("s")[-1].seq
        run = {
            "compact": lambda: agent.compact(session_id="s"),
            "restore": lambda: agent.restore("s", seq),
        }[operation]
        monkeypatch.setattr(_maintenance, "ask", ask)
        with pytest.raises(KeyboardInterrupt):
            run()
        monkeypatch.setattr(_maintenance, "ask", real_ask)
        assert "three" == agent.send("after the Ctrl-C", session_id="s").text
        agent.restore("s", agent.list_checkpoints("s")[0].seq)


def test_the_writes_of_a_batch_an_interrupt_cut_short_fail(tmp_path: Path) -> None:
    """The writes of other threads in a batch whose leader was interrupted (between two
    statements, with its transaction open or before it began) are rolled back and fail with
    WriteInterruptedError: none is reported written, and the database is not left locked."""
    conn = apsw.Connection(str(tmp_path / "x.db"))
    conn.execute("CREATE TABLE t (x)")
    items = [Item(lambda c, tx: c.execute("INSERT INTO t VALUES (1)"), "s", "", 0, waiter())]
    items += [Item(lambda c, tx: None, "s", "", 0, waiter()) for _ in range(2)]
    unsettled(items)
    conn.execute("BEGIN IMMEDIATE")  # the batch's transaction began: its writes reset
    items[0].error = items[1].error = None
    items[0].op(conn, None)
    interrupted(conn, items, KeyboardInterrupt())
    assert not conn.in_transaction
    for it in items:
        with pytest.raises(WriteInterruptedError):
            outcome(it)
    assert [] == list(conn.execute("SELECT x FROM t"))
    conn.close()
