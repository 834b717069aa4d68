"""Time travel at the edges of the file system: names as long as the file system allows, a
user's file that looks like a restore's temp file, a user's empty folder where the agent
deleted a file, tool calls that failed without changing anything, a workspace at ``/`` or
under a path that is not UTF-8, a snapshot over the size cap in a preview, and names that
would break or reorder the lines the CLI prints."""

from __future__ import annotations

import os
import random
import stat
import time
from pathlib import Path
from typing import Any

import pytest
from _cli_runner import Cli
from _restore_model import call, reply

from liteagent.actors._restore_plan import checkpoints, plan_files
from liteagent.actors._snapshots import MAX_SNAPSHOT_BYTES
from liteagent.eventlog import file_checkpointer, fold, memory_checkpointer
from liteagent.eventlog.errors import InvalidArgumentError
from liteagent.providers import scripted
from liteagent.sdk import LiteAgent, RestoreRefusedError, create_lite_agent
from liteagent.tools import bash, delete_file, edit_file, resolve_in_workspace, write_file

TOOLS = [write_file, edit_file, delete_file, bash]


def _agent(work: Path, *script: Any, store: Path | None = None, **kw: Any) -> LiteAgent:
    return create_lite_agent(
        model=scripted(list(script)),
        model_name="m",
        workdir=work,
        checkpointer=memory_checkpointer() if store is None else file_checkpointer(store),
        tools=TOOLS,
        **kw,
    )


def _tree(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under ``root``: kind, permission bits and content."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            data = Path(path).read_bytes() if stat.S_ISREG(st.st_mode) else b""
            kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
            out[os.path.relpath(path, root)] = (kind, stat.S_IMODE(st.st_mode), data)
    return out


@pytest.mark.parametrize("length", [236, 250, 255])
def test_names_as_long_as_the_file_system_allows_are_put_back(tmp_path: Path, length: int) -> None:
    """A user's file with a 236 to 255 byte name the agent deleted comes back, and one the agent
    created goes and comes back with the undo. The temp file of the write used to be named
    after the file (20 bytes longer: over the 255-byte limit), so such a restore failed and
    its undo failed for good."""
    work = tmp_path / "work"
    work.mkdir()
    kept, made = "k" * length, "m" * length
    (work / kept).write_text("the user's only copy\n")
    agent = _agent(
        work,
        call("delete_file", {"path": kept}),
        call("write_file", {"path": made, "content": "agent\n"}),
        reply("done"),
    )
    with agent:
        agent.resume("s")
        agent.send("delete and make")
        before = _tree(work)
        (checkpoint,) = agent.list_checkpoints("s")
        assert {kept, made} == set(checkpoint.files)
        assert not agent.restore("s", checkpoint.seq, dry_run=True).refused
        agent.restore("s", checkpoint.seq)
        assert {kept: ("file", 0o644, b"the user's only copy\n")}.items() <= _tree(work).items()
        assert not (work / made).exists()
        agent.undo_restore("s")
        assert before == _tree(work)


def test_a_users_file_named_like_a_temp_file_is_kept(tmp_path: Path) -> None:
    """Files beside the one a restore puts back whose names only look like its temp files
    (an editor's backup, a file the user named so) are never removed."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("v0\n")
    lookalikes = [
        ".notes.txt.liteagent-20240101",
        ".notes.txt.liteagent-abcdef01",
        ".liteagent-put-0123456789abcdef-01234567",
    ]
    for name in lookalikes:
        (work / name).write_text("the user's\n")
    agent = _agent(
        work, call("write_file", {"path": "notes.txt", "content": "agent\n"}), reply("ok")
    )
    with agent:
        agent.resume("s")
        agent.send("edit notes")
        before = _tree(work)
        agent.restore("s", agent.list_checkpoints("s")[0].seq)
        agent.undo_restore("s")
        assert before == _tree(work)
    assert sorted([*lookalikes, "notes.txt"]) == sorted(os.listdir(work))


def test_a_users_empty_folder_where_the_agent_deleted_a_file_is_refused(tmp_path: Path) -> None:
    """The agent deleted ``a.txt`` and wrote ``b.txt``; then the user made an empty folder
    ``a.txt/``. A restore must put ``a.txt`` back and delete ``b.txt``: it refuses, as it does
    when it deletes nothing, rather than remove the user's folder (which its undo did not
    bring back). A folder the same restore empties is still removed (see
    test_restore_sequences)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("a\n")
    agent = _agent(
        work,
        call("delete_file", {"path": "a.txt"}),
        call("write_file", {"path": "b.txt", "content": "b\n"}),
        reply("ok"),
    )
    with agent:
        agent.resume("s")
        agent.send("swap")
        (work / "a.txt").mkdir(mode=0o700)
        (work / "a.txt" / "sub").mkdir()  # nested empty folders: the user's too
        before = _tree(work)
        seq = agent.list_checkpoints("s")[0].seq
        assert [("a.txt", "the path is now a folder")] == list(
            agent.restore("s", seq, dry_run=True).refused
        )
        with pytest.raises(RestoreRefusedError) as refused:
            agent.restore("s", seq)
        assert [("a.txt", "the path is now a folder")] == refused.value.problems
        assert before == _tree(work)


@pytest.mark.parametrize(
    ("setup", "failing_call"),
    [
        ("folder", {"path": "src", "content": "oops"}),  # write_file onto a folder
        ("file", {"path": "d/x"}),  # delete_file below a file
        ("absent", {"path": "gone.txt"}),  # delete_file of nothing
    ],
)
def test_a_tool_call_that_changed_nothing_does_not_block_a_restore(
    tmp_path: Path, setup: str, failing_call: dict[str, str]
) -> None:
    """A file tool call that failed (or changed nothing) records no change: the checkpoint
    does not list its path and a restore past it is not refused because of what is there.
    Before, it was recorded as a change from "absent" to "absent", and every restore to
    before it was refused ("the path is now a folder", "d on the path is now a file")."""
    work = tmp_path / "work"
    work.mkdir()
    if setup == "folder":
        (work / "src").mkdir()
        (work / "src" / "main.py").write_text("print(1)\n")
    elif setup == "file":
        (work / "d").write_text("a file\n")
    tool = "write_file" if "content" in failing_call else "delete_file"
    agent = _agent(
        work,
        call(tool, failing_call),
        reply("failed"),
        call("write_file", {"path": "a.txt", "content": "new"}),
        reply("ok"),
    )
    with agent:
        agent.resume("s")
        agent.send("try")
        agent.send("write")
        first, second = agent.list_checkpoints("s")
        assert (("a.txt",), ("a.txt",)) == (first.files, second.files)
        before = _tree(work)
        result = agent.restore("s", first.seq)
        assert ("a.txt",) == result.restored_files
        assert not (work / "a.txt").exists()
        agent.undo_restore("s")
        assert before == _tree(work)


def test_an_edit_to_the_same_text_is_no_change(tmp_path: Path) -> None:
    """An edit that leaves the content as it was records nothing; a user's change between it
    and the agent's own earlier write still makes a restore refuse."""
    work = tmp_path / "work"
    work.mkdir()
    agent = _agent(
        work,
        call("write_file", {"path": "a.txt", "content": "x\n"}),
        reply("made"),
        call("write_file", {"path": "a.txt", "content": "y\n"}),
        reply("same"),
    )
    with agent:
        agent.resume("s")
        agent.send("make")
        (work / "a.txt").write_text("y\n")  # the user's edit
        agent.send("write the same")  # writes what is there already
        first = agent.list_checkpoints("s")[0]
        assert ("a.txt",) == first.files
        with pytest.raises(RestoreRefusedError, match="changed since the agent last wrote it"):
            agent.restore("s", first.seq)
        assert "y\n" == (work / "a.txt").read_text()


def test_a_workspace_whose_path_is_not_utf8_is_refused_at_once(cli: Cli, tmp_path: Path) -> None:
    """The log keeps the workspace's path as text: a folder whose path is not UTF-8 is an
    ``InvalidArgumentError`` when the agent is made (it used to be accepted, and every send
    then failed with a ``CodecError``), from the SDK and from the CLI (exit 2)."""
    work = os.path.join(os.fsencode(tmp_path), b"caf\xe9")
    os.mkdir(work)
    with pytest.raises(InvalidArgumentError, match="not valid UTF-8"):
        _agent(Path(os.fsdecode(work)), reply("hi"))
    argv = ["--workdir", os.fsdecode(work), "--home", str(cli.home), "--provider"]
    result = cli.server.run(*argv, cli.script({"text": "hi"}), "run", "hi", "--json")
    assert 2 == result.code
    assert "not valid UTF-8" in result.json()["error"]["message"]


def test_a_workspace_at_the_root_restores_files(tmp_path: Path) -> None:
    """With the workspace at ``/`` a restore puts files back: the inside-the-workspace check
    made the prefix ``//`` and refused every file as outside the workspace."""
    target = tmp_path / "made-by-agent.txt"
    rel = str(target).lstrip("/")
    agent = _agent(Path("/"), call("write_file", {"path": rel, "content": "x"}), reply("ok"))
    with agent:
        agent.resume("s")
        agent.send("make a file")
        assert target.read_text() == "x"
        assert (rel,) == agent.restore("s", agent.list_checkpoints("s")[0].seq).restored_files
        assert not target.exists()


def test_a_preview_names_a_file_over_the_snapshot_cap_unavailable(tmp_path: Path) -> None:
    """Files whose snapshots were over the cap show as ``unavailable`` in a preview (they are
    refused), not as a deletion or as nothing to do."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "big1.bin").write_bytes(b"x" * (MAX_SNAPSHOT_BYTES + 1))
    (work / "big2.bin").write_bytes(b"y" * (MAX_SNAPSHOT_BYTES + 1))
    agent = _agent(
        work,
        call("write_file", {"path": "big1.bin", "content": "small"}),
        call("delete_file", {"path": "big2.bin"}),
        reply("ok"),
    )
    with agent:
        agent.resume("s")
        agent.send("change the big files")
        preview = agent.restore("s", agent.list_checkpoints("s")[0].seq, dry_run=True)
        assert [("big1.bin", "unavailable", 5, None), ("big2.bin", "unavailable", None, None)] == [
            (c.path, c.action, c.size_now, c.size_after) for c in preview.changes
        ]
        assert ["big1.bin", "big2.bin"] == [path for path, _ in preview.refused]


NASTY = "notes.txt (3 B → -)\n  delete    src/main.py"
RLO = "evil\u202etxt.exe"


def test_the_cli_prints_each_name_on_one_line_as_it_is(cli: Cli) -> None:
    """A file name holding a newline or a right-to-left override is printed as the tools
    print it (``\\x0a``, ``\\u202e``) in ``checkpoints``, ``restore --dry-run`` and a
    refusal: a name could forge a line of the preview, or show reordered."""
    cli.ok(
        "run",
        "make them",
        "--session",
        "s1",
        provider=cli.script(
            {"tool": "write_file", "input": {"path": NASTY, "content": "x"}},
            {"tool": "write_file", "input": {"path": RLO, "content": "y"}},
            {"text": "Made."},
        ),
    )
    shown = [NASTY.replace("\n", "\\x0a"), RLO.replace("\u202e", "\\u202e")]
    seq = cli.ok("checkpoints", "s1", "--json").json()[0]["seq"]
    table = cli.ok("checkpoints", "s1").out
    assert 2 == len(table.splitlines())
    assert ", ".join(sorted(shown)) in table
    preview = cli.ok("restore", "s1", str(seq), "--dry-run").out
    assert "\n  delete    src/main.py" not in preview
    assert "\u202e" not in preview
    for name in shown:
        assert f"\n  delete    {name} (1 B → -, +0 -1 lines)\n" in preview
    (cli.work / NASTY).write_text("the user's")
    refused = cli("restore", "s1", str(seq))
    assert 1 == refused.code
    assert f"{shown[0]}: it was changed since" in refused.err
    assert "\n  delete    src/main.py" not in refused.err
    # the printed spelling names the file, given back to a tool
    assert resolve_in_workspace(cli.work, shown[1]) == (cli.work / RLO).resolve()


def test_the_checkpoint_listing_agrees_with_each_checkpoints_plan(tmp_path: Path) -> None:
    """``list_checkpoints`` finds the files of every checkpoint in one pass over the changes
    (it planned each checkpoint's restore on its own: quadratic in the session's length, a
    minute at 11,000 turns). Over writes, deletes, files-only restores and a snapshot missing
    from the blob store, each checkpoint lists what its own plan finds."""
    work = tmp_path / "work"
    work.mkdir()
    rng = random.Random(7)
    script: list[Any] = []
    for i in range(40):
        path = f"d{rng.randrange(3)}/f{rng.randrange(6)}.txt"
        if rng.random() < 0.25:
            script.append(call("delete_file", {"path": path}))
        else:
            script.append(call("write_file", {"path": path, "content": f"v{i}"}))
        script.append(reply(f"turn {i}"))
    cp = file_checkpointer(tmp_path / "store")
    with _agent(work, *script, store=tmp_path / "store") as agent:
        agent.resume("s")
        for i in range(40):
            agent.send(f"prompt {i}")
            if i in (12, 30):
                agent.restore("s", agent.list_checkpoints("s")[i - 5].seq, conversation=False)
        listed = agent.list_checkpoints("s")
    state = fold(cp.read("s"))
    refs = sorted({s.pre_image for _, s in state.snapshots if s.pre_image is not None})
    gone = cp.blobs.delete_blobs([refs[len(refs) // 2]], written_before=time.time() + 60)
    assert 1 == len(gone)  # a snapshot missing from the store: its file is unavailable
    assert any(c.unavailable_files for c in checkpoints(state, cp.blobs))
    for blobs in (cp.blobs, None):
        expected = []
        for mark in state.checkpoints:
            plans = plan_files(state, mark.seq, blobs)
            expected.append(
                (
                    tuple(p.path for p in plans if not p.unavailable),
                    tuple(p.path for p in plans if p.unavailable),
                )
            )
        assert expected == [(c.files, c.unavailable_files) for c in checkpoints(state, blobs)]
    assert [(c.seq, c.files) for c in listed] == [
        (c.seq, c.files) for c in checkpoints(state, None)
    ]
    cp.close()
