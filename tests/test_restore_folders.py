"""A restore removes the folders the agent's file tools created, when they are empty, and
never a folder that was there before or that holds anything; an undo brings them back."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from _restore_model import call, reply

from liteagent.actors._restore_files import backup_files
from liteagent.actors._restore_plan import FilePlan
from liteagent.eventlog import file_checkpointer, fold
from liteagent.eventlog.types import FileSnapshot, RestoreStarted
from liteagent.providers import scripted
from liteagent.sdk import LiteAgent, create_lite_agent
from liteagent.tools import delete_file, edit_file, write_file


def _agent(work: Path, store: Path, *script: Any) -> LiteAgent:
    return create_lite_agent(
        model=scripted(list(script)),
        model_name="m",
        workdir=work,
        checkpointer=file_checkpointer(store),
        tools=[write_file, edit_file, delete_file],
    )


def _entries(root: Path) -> set[str]:
    """Every file and folder under ``root``, relative, folders with a trailing slash."""
    out = set()
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        out |= {os.path.normpath(os.path.join(rel, d)) + "/" for d in dirs}
        out |= {os.path.normpath(os.path.join(rel, f)) for f in files}
    return out


def test_a_restore_removes_the_folders_the_agent_made_and_the_undo_brings_them_back(
    tmp_path: Path,
) -> None:
    """The agent writes ``a/b/c/new.txt`` into a workspace holding ``a/``: the snapshot records
    that the call created ``a/b`` and ``a/b/c``, a restore removes both (and the file) but
    keeps ``a/``, and its undo brings all back."""
    work = tmp_path / "work"
    (work / "a").mkdir(parents=True)
    (work / "a" / "mine.txt").write_text("the user's\n")
    agent = _agent(
        work,
        tmp_path / "store",
        call("write_file", {"path": "a/b/c/new.txt", "content": "agent\n"}),
        reply("done"),
    )
    with agent:
        agent.resume("s")
        agent.send("make it")
        after = _entries(work)
        assert {"a/", "a/mine.txt", "a/b/", "a/b/c/", "a/b/c/new.txt"} == after
        (checkpoint,) = agent.list_checkpoints("s")
        agent.restore("s", checkpoint.seq)
        assert {"a/", "a/mine.txt"} == _entries(work)
        agent.undo_restore("s")
        assert after == _entries(work)
    with file_checkpointer(tmp_path / "store") as cp:
        snaps = [e.body for e in cp.read("s") if isinstance(e.body, FileSnapshot)]
        assert [("a/b", "a/b/c")] == [s.created_folders for s in snaps]
        fold(cp.read("s"))  # the field folds


def test_folders_that_hold_anything_or_were_there_before_are_kept(tmp_path: Path) -> None:
    """A folder the agent made that now also holds a user's file stays (with that file), and
    an empty folder of the user's that the agent wrote into stays empty, not removed."""
    work = tmp_path / "work"
    (work / "empty").mkdir(parents=True)
    agent = _agent(
        work,
        tmp_path / "store",
        call("write_file", {"path": "made/x.txt", "content": "1"}),
        call("write_file", {"path": "empty/y.txt", "content": "2"}),
        call("write_file", {"path": "gone/deep/z.txt", "content": "3"}),
        reply("done"),
    )
    with agent:
        agent.resume("s")
        agent.send("write three")
        (work / "made" / "user.txt").write_text("the user's\n")
        (checkpoint,) = agent.list_checkpoints("s")
        agent.restore("s", checkpoint.seq)
        assert {"made/", "made/user.txt", "empty/"} == _entries(work)


def test_a_conversation_only_restore_removes_no_folder(tmp_path: Path) -> None:
    """``files=False`` leaves the workspace alone, folders included."""
    work = tmp_path / "work"
    work.mkdir()
    agent = _agent(
        work,
        tmp_path / "store",
        call("write_file", {"path": "d/x.txt", "content": "1"}),
        reply("done"),
    )
    with agent:
        agent.resume("s")
        agent.send("write")
        (checkpoint,) = agent.list_checkpoints("s")
        agent.restore("s", checkpoint.seq, files=False)
        assert {"d/", "d/x.txt"} == _entries(work)


def test_a_folder_made_by_a_later_turn_goes_only_with_a_restore_before_that_turn(
    tmp_path: Path,
) -> None:
    """Turn 1 makes ``p/``, turn 2 makes ``p/q/``: a restore to turn 2 removes ``p/q/`` alone
    (``p/`` still holds turn 1's file), a restore to turn 1 then removes ``p/``."""
    work = tmp_path / "work"
    work.mkdir()
    agent = _agent(
        work,
        tmp_path / "store",
        call("write_file", {"path": "p/one.txt", "content": "1"}),
        reply("one"),
        call("write_file", {"path": "p/q/two.txt", "content": "2"}),
        reply("two"),
    )
    with agent:
        agent.resume("s")
        agent.send("first")
        agent.send("second")
        first, second = agent.list_checkpoints("s")
        agent.restore("s", second.seq)
        assert {"p/", "p/one.txt"} == _entries(work)
        agent.restore("s", first.seq)
        assert set() == _entries(work)


def test_a_folder_a_files_only_restore_removed_is_not_the_agents_any_more(
    tmp_path: Path,
) -> None:
    """A files-only restore removes the agent's ``a/``; the user then makes a folder ``a/`` of
    their own; a later restore to the same checkpoint leaves it (it used to remove it: the
    snapshot still named ``a/`` as made by the agent)."""
    work = tmp_path / "work"
    work.mkdir()
    agent = _agent(
        work,
        tmp_path / "store",
        call("write_file", {"path": "a/f.txt", "content": "x"}),
        reply("one"),
        call("write_file", {"path": "z.txt", "content": "z"}),
        reply("two"),
    )
    with agent:
        agent.resume("s")
        agent.send("first")
        agent.send("second")
        first, _ = agent.list_checkpoints("s")
        agent.restore("s", first.seq, conversation=False)
        assert set() == _entries(work)
        (work / "a").mkdir()  # the user's own
        agent.restore("s", first.seq)
        assert {"a/"} == _entries(work)


def test_finishing_an_interrupted_restore_removes_the_folders_too(tmp_path: Path) -> None:
    """A restore cut short after it deleted ``a/b/f.txt`` (its intent at the end of the log):
    ``finish_restore()`` removes the folders the agent made for it as well, as ``restore()``
    does (they used to stay, empty)."""
    work = tmp_path / "work"
    work.mkdir()
    agent = _agent(
        work,
        tmp_path / "store",
        call("write_file", {"path": "a/b/f.txt", "content": "x"}),
        reply("done"),
    )
    with agent:
        agent.resume("s")
        agent.send("make it")
        (checkpoint,) = agent.list_checkpoints("s")
    with file_checkpointer(tmp_path / "store") as cp:
        plan = FilePlan(path="a/b/f.txt", target=None, target_hash=None, last_hash=None)
        records = backup_files(work, [plan], cp.blobs)
        intent = RestoreStarted(to_seq=checkpoint.seq, conversation=True, files=tuple(records))
        cp.append("s", [intent])
    (work / "a" / "b" / "f.txt").unlink()  # what the restore did before it was cut short
    with _agent(work, tmp_path / "store") as again:
        assert again.pending_restore("s") is not None
        again.finish_restore("s")
        assert again.pending_restore("s") is None
    assert set() == _entries(work)
