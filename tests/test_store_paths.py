"""A store opened with a relative path stays where it was opened: a process that changes its
current folder later (a daemon's ``chdir("/")``) keeps reading and writing the same store, from
every thread, including threads that open their first connection after the change. (Every
backend's plain relative path: the conformance suite's ``DurableConformance``; here the other
spellings, the blob store, the home folder and an agent.)"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from liteagent.eventlog import Checkpointer, file_checkpointer, project_dir, sqlite_checkpointer
from liteagent.eventlog.backend import FileBlobStore
from liteagent.eventlog.types import AssistantMessage, TextBlock, UserPrompt
from liteagent.providers import scripted
from liteagent.sdk import create_lite_agent

STORES: dict[str, Callable[[], Checkpointer]] = {
    "file-dotted": lambda: file_checkpointer(os.path.join(".", "data", "..", "logs")),
    "sqlite-uri": lambda: sqlite_checkpointer("file:sessions.db?mode=rwc"),
    "sqlite-subfolder": lambda: sqlite_checkpointer(os.path.join("data", "..", "s.db")),
}


def _prompt(text: str) -> UserPrompt:
    return UserPrompt(content=(TextBlock(text),))


def _reply(text: str) -> AssistantMessage:
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def _texts(cp: Checkpointer, session_id: str) -> list[str]:
    return [e.body.content[0].text for e in cp.read(session_id) if isinstance(e.body, UserPrompt)]


def _in_new_thread(fn: Callable[[], list[str]]) -> list[str]:
    """``fn`` run on a thread started now (which opens its own connections)."""
    out: list[list[str]] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(60)
    assert out, "the reading thread did not finish"
    return out[0]


@pytest.mark.parametrize("kind", list(STORES))
def test_a_relative_store_path_survives_a_change_of_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Appends and reads after ``chdir`` reach the store opened before it, from the opening
    thread and from a new one; nothing is created in the new folder."""
    first, later = tmp_path / "first", tmp_path / "later"
    first.mkdir()
    later.mkdir()
    monkeypatch.chdir(first)
    cp = STORES[kind]()
    try:
        cp.append("s", [_prompt("before")])
        monkeypatch.chdir(later)
        cp.append("s", [_prompt("after")])
        assert ["before", "after"] == _texts(cp, "s")
        assert ["before", "after"] == _in_new_thread(lambda: _texts(cp, "s"))
        assert ["s"] == [info.id for info in cp.list()]
    finally:
        cp.close()
    assert [] == os.listdir(later)
    monkeypatch.chdir(first)
    again = STORES[kind]()
    try:
        assert ["before", "after"] == _texts(again, "s")
    finally:
        again.close()


def test_a_relative_blob_store_root_survives_a_change_of_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blob put before ``chdir`` is read after it; the store's root is absolute."""
    monkeypatch.chdir(tmp_path)
    store = FileBlobStore(Path("blobs"))
    ref = store.put(b"kept")
    monkeypatch.chdir("/")
    assert b"kept" == store.get(ref)
    assert store.root == tmp_path / "blobs"


def test_a_relative_home_gives_an_absolute_project_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``project_dir`` with a relative home (argument or ``$LITE_AGENT_HOME``) is absolute,
    so a default file store opened from it stays put."""
    monkeypatch.chdir(tmp_path)
    assert project_dir(tmp_path, home="home").is_absolute()
    assert project_dir(tmp_path, home="home").is_relative_to(tmp_path / "home")
    monkeypatch.setenv("LITE_AGENT_HOME", "env-home")
    assert project_dir(tmp_path).is_relative_to(tmp_path / "env-home")


def test_an_agent_on_a_relative_store_keeps_its_sessions_after_a_change_of_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon opens its store relative to where it starts, then changes folder: its sessions
    go on, and a new agent on the same store finds both turns."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(tmp_path)
    agent = create_lite_agent(
        model=scripted([_reply("one"), _reply("two")]),
        model_name="m",
        workdir=work,
        checkpointer=sqlite_checkpointer("sessions.db"),
    )
    try:
        assert "one" == agent.send("first", session_id="d").text
        monkeypatch.chdir("/")
        assert "two" == agent.send("second", session_id="d").text
    finally:
        agent.close()
    cp = sqlite_checkpointer(tmp_path / "sessions.db")
    try:
        assert ["first", "second"] == _texts(cp, "d")
    finally:
        cp.close()
