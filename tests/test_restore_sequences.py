"""Property: any sequence of turns, files-only restores, full restores and undos keeps the log's
record of the files true to the workspace.

A files-only restore changes files without truncating the log, so it is a change of the agent's
like a tool's write: a later restore to an earlier checkpoint must put those files back too,
and must never take the restore's own writes for someone else's edit. Random runs (seeded, on
the file and SQLite backends) check, after every restore with files, that the workspace is
exactly what it was just before the checkpoint's prompt was sent, that no restore is refused
(nobody but the agent touches the files), and that an undo of the last restore brings back the
workspace as it was before it.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from liteagent.eventlog import Checkpointer, file_checkpointer, fold, sqlite_checkpointer
from liteagent.eventlog.types import (
    AssistantMessage,
    ModelRequest,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from liteagent.providers import scripted
from liteagent.sdk import NoBranchError, RestoreRefusedError, create_lite_agent

NAMES = ("a.txt", "b.txt", "d/c.txt")


def _files(work: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(work)): p.read_bytes() for p in sorted(work.rglob("*")) if p.is_file()
    }


class _Model:
    """Each prompt: one write or delete of a random file, then a reply."""

    def __init__(self, rnd: random.Random, work: Path) -> None:
        self.rnd, self.work, self.calls = rnd, work, 0

    def __call__(self, request: ModelRequest) -> AssistantMessage:
        if any(isinstance(b, ToolResultBlock) for b in request.messages[-1].content):
            return AssistantMessage(content=(TextBlock("done"),), stop_reason="end_turn")
        self.calls += 1
        path = self.rnd.choice(NAMES)
        if self.rnd.random() < 0.25 and (self.work / path).exists():
            name, input = "delete_file", {"path": path}
        else:
            name, input = "write_file", {"path": path, "content": f"v{self.calls}\n"}
        return AssistantMessage(
            content=(ToolUseBlock(f"toolu_{self.calls}", name, input),), stop_reason="tool_use"
        )


def _checkpointer(backend: str, tmp_path: Path) -> Checkpointer:
    if backend == "file":
        return file_checkpointer(tmp_path / "store")
    return sqlite_checkpointer(tmp_path / "store.db")


def _run(seed: int, backend: str, tmp_path: Path) -> list[Any]:
    """One random run; returns the operations it did (for the failure message)."""
    rnd = random.Random(seed)
    work = tmp_path / "work"
    work.mkdir()
    cp = _checkpointer(backend, tmp_path)
    model = _Model(rnd, work)
    before: dict[str, dict[str, bytes]] = {}  # prompt -> the workspace just before it
    done: list[Any] = []
    with create_lite_agent(
        model=scripted([model] * 200), model_name="m", workdir=work, checkpointer=cp
    ) as agent:
        sid = agent.session_id
        last_restore: dict[str, bytes] | None = None
        for step in range(30):
            op = rnd.choice(["send", "send", "restore", "restore", "undo"])
            checkpoints = agent.list_checkpoints()
            if op == "send" or not checkpoints:
                prompt = f"prompt {step}"
                before[prompt] = _files(work)
                agent.send(prompt)
                done.append(prompt)
                last_restore = None
            elif op == "restore":
                point = rnd.choice(checkpoints)
                conversation = rnd.random() < 0.5
                was = _files(work)
                done.append(("restore", point.prompt, "full" if conversation else "files"))
                agent.restore(sid, point.seq, conversation=conversation)
                assert before[point.prompt] == _files(work), done
                last_restore = was
            else:
                was = _files(work)
                refused = ""
                try:
                    agent.undo_restore(sid)
                except NoBranchError:
                    continue
                except RestoreRefusedError as e:
                    refused = str(e)
                if refused:
                    assert "moved on" in refused, (done, refused)  # a later turn: documented
                    continue
                done.append("undo")
                if last_restore is not None:
                    assert last_restore == _files(work), done
                last_restore = was
        state = fold(list(cp.read(sid)))
        assert (False, None) == (state.turn_open, state.pending_restore), done
    return done


@pytest.mark.parametrize(
    ("seed", "backend"), [(s, "file") for s in range(12)] + [(s, "sqlite") for s in range(12, 18)]
)
def test_files_only_restores_are_changes_a_later_restore_undoes(
    seed: int, backend: str, tmp_path: Path
) -> None:
    """No restore is refused, each puts back the workspace of its checkpoint, and an undo of
    the last restore brings back the workspace before it (module docstring)."""
    done = _run(seed, backend, tmp_path)
    assert any(isinstance(d, tuple) and d[2] == "files" for d in done), "a files-only restore ran"


def test_a_full_restore_after_a_files_only_one_puts_the_later_content_back(
    tmp_path: Path,
) -> None:
    """The smallest case: a.txt v1 (prompt 1), v2 (prompt 2); a files-only restore to prompt 2
    puts v1 back; a full restore to prompt 3 (after which only that restore changed a.txt)
    puts v2 back, and a restore to prompt 2 is then allowed (not taken for a user's edit)."""
    work = tmp_path / "work"
    work.mkdir()
    cp = file_checkpointer(tmp_path / "store")
    turns = [
        AssistantMessage(
            content=(ToolUseBlock(f"t{i}", "write_file", {"path": "a.txt", "content": text}),),
            stop_reason="tool_use",
        )
        for i, text in ((1, "v1\n"), (2, "v2\n"))
    ]
    done = AssistantMessage(content=(TextBlock("ok"),), stop_reason="end_turn")
    with create_lite_agent(
        model=scripted([turns[0], done, turns[1], done, done]),
        model_name="m",
        workdir=work,
        checkpointer=cp,
    ) as agent:
        for prompt in ("one", "two", "three"):
            agent.send(prompt)
        sid = agent.session_id
        one, two, three = agent.list_checkpoints()
        assert ("a.txt",) == agent.restore(sid, two.seq, conversation=False).restored_files
        assert "v1\n" == (work / "a.txt").read_text()
        assert ("a.txt",) == agent.list_checkpoints()[2].files
        assert ("a.txt",) == agent.restore(sid, three.seq).restored_files
        assert "v2\n" == (work / "a.txt").read_text()
        agent.restore(sid, two.seq)
        assert "v1\n" == (work / "a.txt").read_text()
        agent.restore(sid, one.seq)
        assert not (work / "a.txt").exists()
