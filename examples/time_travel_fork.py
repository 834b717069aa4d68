"""The README's "Fork" block, run offline: a scripted model writes a file and changes it;
the block forks the session from before the change, continues the fork, and forks again
into a copy of the workspace.

Run: python examples/time_travel_fork.py
"""

from __future__ import annotations

import shutil
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


root = Path(tempfile.mkdtemp())
work = root / "work"
work.mkdir()
model = scripted(
    [
        *write("t1", "app.py", "v1\n"),
        *write("t2", "app.py", "v2\n"),
        *write("t3", "idea.py", "another way\n"),
    ]
)
agent = create_lite_agent(model=model, model_name="scripted", workdir=work, home=root / "home")
agent.send("create app.py")
agent.send("make it v2")
session_id = agent.session_id
seq = agent.list_checkpoints()[1].seq  # before "make it v2"
copy = shutil.copytree(work, root / "copy")  # a copy of the workspace

# The README's block (tests/test_examples.py checks that it is the same there):
new_id = agent.fork(session_id, seq)  # the log before that checkpoint, then a Forked record
agent.send("try it another way", session_id=new_id)
agent.fork(session_id, seq, workdir=copy)  # files put back in copy, a copy of the workspace
# (end of the README's block)

print("fork:", [c.prompt for c in agent.list_checkpoints(new_id)])
print("original:", [c.prompt for c in agent.list_checkpoints(session_id)])
print("workspace app.py:", (work / "app.py").read_text().strip())
print("copy app.py:", (Path(copy) / "app.py").read_text().strip())
print("sessions:", len(agent.list_sessions()))
agent.close()
