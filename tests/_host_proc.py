"""One host of tests/test_many_hosts.py, as a real OS process: an asyncio agent over a shared
store (file or SQLite) running ``sessions`` concurrent sessions of ``turns`` sends each (one
``write_file`` call and a reply per turn), then writing what each send ended with to a JSON
file: ``{"session id": ["ok" | "AgentBusyError" | "<error type>: <message>", ...]}``.

    python _host_proc.py BACKEND STORE WORKDIR HOST SESSIONS TURNS SHARED OUT
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import threading
import traceback
from pathlib import Path

from liteagent.eventlog import Checkpointer, file_checkpointer, sqlite_checkpointer
from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolResultBlock, ToolUseBlock
from liteagent.providers import scripted
from liteagent.providers._contract import ModelRequest
from liteagent.sdk import AgentBusyError, create_async_lite_agent
from liteagent.tools import write_file


class WriteThenReply:
    """A prompt gets one write_file call to a file of this host's own; its result gets "ok"."""

    def __init__(self, host: int) -> None:
        self.host = host
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def __call__(self, request: ModelRequest) -> AssistantMessage:
        last = request.messages[-1]
        if any(isinstance(b, ToolResultBlock) for b in last.content):
            return AssistantMessage(content=(TextBlock("ok"),), stop_reason="end_turn")
        with self._lock:
            n = next(self._ids)
        path = f"h{self.host}/f{n}.txt"
        call = ToolUseBlock(f"toolu_{self.host}_{n}", "write_file", {"path": path, "content": "x"})
        return AssistantMessage(content=(call,), stop_reason="tool_use")


def open_store(backend: str, store: Path, workdir: Path) -> Checkpointer:
    """The shared store: ``store`` is the SQLite file, or the file backend's home."""
    if backend == "sqlite":
        return sqlite_checkpointer(store)
    return file_checkpointer(workdir=workdir, home=store)


async def run(argv: list[str]) -> dict[str, list[str]]:
    backend, store, workdir = argv[0], Path(argv[1]), Path(argv[2])
    host, sessions, turns, shared = int(argv[3]), int(argv[4]), int(argv[5]), argv[6] == "1"
    model = WriteThenReply(host)
    checkpointer = open_store(backend, store, workdir)
    agent = create_async_lite_agent(
        model=scripted([model] * (sessions * turns * 2)),
        model_name="m",
        workdir=workdir,
        tools=[write_file],
        checkpointer=checkpointer,
    )

    async def session(sid: str) -> list[str]:
        ended = []
        for t in range(turns):
            try:
                await agent.send(f"host {host} turn {t}", session_id=sid)
                ended.append("ok")
            except AgentBusyError:
                ended.append("AgentBusyError")
            except Exception as e:  # noqa: BLE001 -- every outcome is reported
                ended.append(f"{type(e).__name__}: {e}")
                traceback.print_exc()  # on stderr, which the test shows when it fails
        return ended

    ids = [f"s{i}" if shared else f"h{host}-s{i}" for i in range(sessions)]
    with checkpointer:
        async with agent:
            outcomes = await asyncio.gather(*(session(sid) for sid in ids))
    return dict(zip(ids, outcomes, strict=True))


if __name__ == "__main__":
    result = asyncio.run(run(sys.argv[1:8]))
    Path(sys.argv[8]).write_text(json.dumps(result))
