"""The README's "Verifying a replay" block, run offline: the ``checkpointer`` and
``session_id`` it names are a SQLite store in a temporary folder and a session a scripted
model ran two prompts in, one with a tool call.

Run: python examples/verify_replay.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from liteagent.eventlog import sqlite_checkpointer
from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolUseBlock
from liteagent.providers import scripted
from liteagent.sdk import create_lite_agent

work = Path(tempfile.mkdtemp())
write = ToolUseBlock("t1", "write_file", {"path": "hello.py", "content": "print('hi')\n"})
model = scripted(
    [
        AssistantMessage(content=(write,), stop_reason="tool_use"),
        AssistantMessage(content=(TextBlock("Created hello.py."),), stop_reason="end_turn"),
        AssistantMessage(content=(TextBlock("It prints hi."),), stop_reason="end_turn"),
    ]
)
checkpointer = sqlite_checkpointer(work / "sessions.db")
with create_lite_agent(
    model=model, model_name="scripted", workdir=work, checkpointer=checkpointer
) as agent:
    agent.send("Create hello.py")
    agent.send("What does it print?")
    session_id = agent.session_id

# The README's block (tests/test_examples.py checks that it is the same there):
from liteagent.context import verify_replay

report = verify_replay(checkpointer.read(session_id))
assert report.ok, [(c.seq, c.problem) for c in report.mismatches]
# (end of the README's block)

print("verified:", len(report.checks), "requests, levels", [c.level for c in report.checks])
checkpointer.close()
