"""The agent end to end on the PostgreSQL backend: a real session with tool calls (file
snapshots as blobs in the database), a restore, a compaction, and a resume from a second
process (another "host" of the same store)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="the postgres extra (psycopg) is not installed")

import psycopg
from _postgres_server import Server

from liteagent.context import Compactor, CompactResult, estimate_tokens
from liteagent.eventlog import postgres_checkpointer
from liteagent.eventlog.conformance._processes import mp_context
from liteagent.eventlog.types import AssistantMessage, Message, TextBlock, ToolUseBlock, Usage
from liteagent.providers import scripted
from liteagent.sdk import create_lite_agent


def reply(text: str) -> AssistantMessage:
    """A final assistant text."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def write(path: str, content: str) -> list[AssistantMessage]:
    """A turn that writes one file."""
    call = ToolUseBlock(
        f"toolu_{uuid.uuid4().hex[:12]}", "write_file", {"path": path, "content": content}
    )
    return [AssistantMessage(content=(call,), stop_reason="tool_use"), reply(f"wrote {path}")]


class KeepLast(Compactor):
    """Keeps a summary line and the last message pair."""

    def maybe_compact(
        self,
        messages: Sequence[Message],
        usage: Usage | None = None,
        instructions: str | None = None,
    ) -> CompactResult:
        before = estimate_tokens(messages)
        kept = (Message("user", (TextBlock("[summary]"),)), *messages[-2:])
        return CompactResult(
            messages=kept, changed=True, tokens_before=before, tokens_after=estimate_tokens(kept)
        )


@pytest.fixture
def schema(postgres_server: Server) -> Iterator[str]:
    """A fresh schema, dropped afterwards."""
    name = "a_" + uuid.uuid4().hex[:16]
    yield name
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _second_process(dsn: str, schema: str, workdir: str, session_id: str, out: Any) -> None:
    provider = scripted([reply("from the second host")])
    with (
        postgres_checkpointer(dsn, schema=schema) as cp,
        create_lite_agent(
            model=provider, model_name="m", workdir=Path(workdir), checkpointer=cp
        ) as agent,
    ):
        agent.resume(session_id)
        text = agent.send("continue there").text
    texts = [
        " ".join(getattr(b, "text", "") for b in m.content) for m in provider.requests[0].messages
    ]
    out.put((text, texts))


@pytest.mark.processes
def test_agent_session_restore_compaction_and_resume_elsewhere(
    postgres_server: Server, schema: str, tmp_path: Path
) -> None:
    """Turns with file writes, a restore to the second prompt (files and log), a compaction,
    then a second process resumes the session from the database and continues it."""
    dsn = postgres_server.dsn
    workdir = tmp_path / "work"
    workdir.mkdir()
    script = [*write("a.txt", "v1"), *write("a.txt", "v2"), reply("p3 done"), reply("after")]
    with (
        postgres_checkpointer(dsn, schema=schema) as cp,  # the agent leaves a given one open
        create_lite_agent(
            model=scripted(script),
            model_name="m",
            workdir=workdir,
            checkpointer=cp,
            compactor=KeepLast(),
        ) as agent,
    ):
        agent.send("p1")
        agent.send("p2")
        agent.send("p3")
        sid = agent.session_id
        checkpoints = agent.list_checkpoints()
        assert ["p1", "p2", "p3"] == [c.prompt for c in checkpoints]
        result = agent.restore(sid, checkpoints[1].seq)
        assert result.conversation_restored
        assert "v1" == (workdir / "a.txt").read_text()
        assert checkpoints[1].seq - 1 == cp.head(sid)
        agent.resume(sid)
        agent.send("p2 again")
        stats = agent.compact()
        assert stats.changed
        kinds = [e.kind for e in cp.read(sid)]
        assert "compaction" == kinds[-1]
        assert cp.check_integrity().ok
    ctx = mp_context()
    out = ctx.Queue()
    proc = ctx.Process(target=_second_process, args=(dsn, schema, str(workdir), sid, out))
    proc.start()
    text, texts = out.get(timeout=120)
    proc.join(60)
    assert 0 == proc.exitcode
    assert "from the second host" == text
    assert ["[summary] p2 again", "after", "continue there"] == texts
