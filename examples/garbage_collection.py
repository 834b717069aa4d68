"""The README's "Garbage collection" block, run offline: a scripted model writes a file in a
session that is restored once, then the block collects garbage and deletes the session.

Run: python examples/garbage_collection.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolUseBlock
from liteagent.providers import scripted
from liteagent.sdk import create_lite_agent


def write(call_id: str, path: str, content: str) -> list[AssistantMessage]:
    """One turn of the scripted model: it writes ``path`` with the real tool, then says so."""
    call = ToolUseBlock(call_id, "write_file", {"path": path, "content": content})
    return [
        AssistantMessage(content=(call,), stop_reason="tool_use"),
        AssistantMessage(content=(TextBlock(f"wrote {path}"),), stop_reason="end_turn"),
    ]


work = Path(tempfile.mkdtemp())
model = scripted([*write("t1", "app.py", "v1\n"), *write("t2", "app.py", "v2\n")])
agent = create_lite_agent(model=model, model_name="scripted", workdir=work, home=tempfile.mkdtemp())
agent.send("create app.py")
agent.send("make it v2")
session_id = agent.session_id
agent.restore(session_id, agent.list_checkpoints()[1].seq)  # kept as a branch

# The README's block (tests/test_examples.py checks that it is the same there):
report = agent.collect_garbage(grace=3600)  # GarbageReport(deleted, freed_bytes, young, ...)
agent.collect_garbage(branch_retention=30 * 86400)  # and branches older than 30 days
agent.delete_session(session_id)  # its branches go too; the next collection reclaims the blobs
# (end of the README's block)

print("within the grace period:", report.deleted, "deleted,", report.young, "young")
later = agent.collect_garbage(grace=0)  # nothing else writes to this store
print("after the delete:", later.deleted > 0, "deleted; sessions:", agent.list_sessions())
agent.close()
