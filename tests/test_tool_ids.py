"""Tool call ids the model (or a proxy in front of it) gets wrong never wedge a session.

The Messages API refuses a request whose ``tool_use`` ids repeat, or hold other characters
than letters, digits, ``_`` and ``-`` (the fake server refuses them as it does). liteagent
used to record such ids as they came and send them back with every later request: every send
of the session failed from then on, in a new process too. A call whose id, name or other
field holds a value the log cannot store (a lone surrogate) was
kept as a raw block and never answered, with the same result. Now each call gets an id the
API accepts and no other call of the session has, and is run and answered.

Over real HTTP, with the real ``anthropic`` client and the fake Messages server.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from liteagent.eventlog import file_checkpointer
from liteagent.eventlog.types import AssistantMessage, ToolUseBlock
from liteagent.providers import AnthropicProvider
from liteagent.providers.testing import FakeMessagesServer, message, text, tool_use
from liteagent.sdk import LiteAgent, create_lite_agent
from liteagent.tools import glob


@pytest.fixture
def server() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer() as s:
        yield s


@contextmanager
def _agent(server: FakeMessagesServer, root: Path) -> Iterator[LiteAgent]:
    (root / "work").mkdir(exist_ok=True)
    with (
        AnthropicProvider(server.client(max_retries=0), ()) as provider,
        create_lite_agent(
            model=provider,
            model_name="claude-test",
            workdir=root / "work",
            checkpointer=file_checkpointer(root / "store"),
            tools=[glob],
            context=False,
        ) as agent,
    ):
        yield agent


def _calls(agent: LiteAgent, root: Path) -> list[ToolUseBlock]:
    with file_checkpointer(root / "store") as cp:
        return [
            b
            for e in cp.read(agent.session_id)
            if isinstance(e.body, AssistantMessage)
            for b in e.body.content
            if isinstance(b, ToolUseBlock)
        ]


def _glob(ident: str, pattern: str = "*") -> dict[str, Any]:
    return tool_use(ident, "glob", {"pattern": pattern})


CASES = {
    "twice in one answer": [[_glob("toolu_d"), _glob("toolu_d", "*.py")]],
    "again in a later answer": [[_glob("toolu_s")], [_glob("toolu_s", "*.py")]],
    "empty": [[_glob("")]],
    "with spaces and accents": [[_glob("tool use ü")]],
    "a lone surrogate in the id": [[_glob("toolu_\ud800")]],
    "a lone surrogate in the name": [[tool_use("toolu_n", "glob\ud800", {"pattern": "*"})]],
    "a lone surrogate beside the input": [[{**_glob("toolu_x"), "x_note": {"n": "\ud800"}}]],
}


@pytest.mark.parametrize("case", CASES)
def test_tool_ids_the_api_would_refuse_are_replaced(
    server: FakeMessagesServer, tmp_path: Path, case: str
) -> None:
    """Every call runs and is answered, every later request is one the API accepts (the
    fake server refuses the others), and the session goes on, in a new agent too."""
    answers = CASES[case]
    for calls in answers:
        server.add(message(calls, stop_reason="tool_use"))
    server.add(message([text("first done")]), message([text("second done")]))
    with _agent(server, tmp_path) as agent:
        assert "first done" == agent.send("one").text
        assert "second done" == agent.send("two").text
        calls = _calls(agent, tmp_path)
        sid = agent.session_id
    ids = [c.id for c in calls]
    assert len(ids) == len(set(ids)) == sum(len(a) for a in answers)
    assert all(i.isascii() and i.replace("_", "").replace("-", "").isalnum() for i in ids)
    results = [
        b["tool_use_id"]
        for m in server.requests[-1].body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    assert ids == results
    server.add(message([text("resumed")]))
    with _agent(server, tmp_path) as again:
        again.resume(sid)
        assert "resumed" == again.send("three").text


def test_a_valid_unique_id_is_kept(server: FakeMessagesServer, tmp_path: Path) -> None:
    """Ids the API accepts and the session has not used are recorded as the model gave them."""
    server.add(
        message([_glob("toolu_01A"), _glob("toolu-01_b", "*.py")], stop_reason="tool_use"),
        message([text("done")]),
    )
    with _agent(server, tmp_path) as agent:
        agent.send("one")
        assert ["toolu_01A", "toolu-01_b"] == [c.id for c in _calls(agent, tmp_path)]
