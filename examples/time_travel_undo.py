"""The README's "Undo" block, run offline: a scripted model writes a file and changes it;
the block restores to before the change, undoes that, undoes the undo, and undoes again.

Run: python examples/time_travel_undo.py
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


def state() -> str:
    """What app.py holds and which prompts the conversation has."""
    prompts = [c.prompt for c in agent.list_checkpoints()]
    return f"app.py {(work / 'app.py').read_text().strip()}, prompts {prompts}"


work = Path(tempfile.mkdtemp())
model = scripted([*write("t1", "app.py", "v1\n"), *write("t2", "app.py", "v2\n")])
agent = create_lite_agent(model=model, model_name="scripted", workdir=work, home=tempfile.mkdtemp())
agent.send("create app.py")
agent.send("make it v2")
session_id = agent.session_id
seq = agent.list_checkpoints()[1].seq  # before "make it v2"

# The README's block (tests/test_examples.py checks that it is the same there):
result = agent.restore(session_id, seq)  # result.branch: what it took away
agent.list_branches(session_id)  # [Branch(id, made_by, at_seq, events, files, available, ...)]
agent.undo_restore(session_id)  # the events come back, and the files as they were before
agent.undo_restore(session_id)  # an undo is undoable too: back to the restored state
branch_id = agent.list_branches(session_id)[-1].id  # oldest first
agent.undo_restore(session_id, branch=branch_id)  # a particular one
# (end of the README's block)

print("the restore's branch:", result.branch is not None)
print("after three undos:", state())
print("branches:", [(b.made_by, b.available) for b in agent.list_branches(session_id)])
agent.close()
