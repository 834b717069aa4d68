"""The README's "Time travel" block, run offline: a scripted model writes files in two
sessions, then the block lists the checkpoints and restores each way.

Run: python examples/time_travel_restore.py
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolUseBlock
from liteagent.providers import scripted
from liteagent.sdk import create_lite_agent

ids = itertools.count(1)


def write(path: str, content: str) -> list[AssistantMessage]:
    """One turn of the scripted model: it writes ``path`` with the real tool, then says so."""
    call = ToolUseBlock(f"t{next(ids)}", "write_file", {"path": path, "content": content})
    return [
        AssistantMessage(content=(call,), stop_reason="tool_use"),
        AssistantMessage(content=(TextBlock(f"wrote {path}"),), stop_reason="end_turn"),
    ]


work = Path(tempfile.mkdtemp())
model = scripted(
    [
        *write("notes.txt", "v1\n"),
        *write("notes.txt", "v2\n"),
        *write("extra.txt", "more\n"),
        *write("other.txt", "v1\n"),
        *write("other.txt", "v2\n"),
    ]
)
agent = create_lite_agent(model=model, model_name="scripted", workdir=work, home=tempfile.mkdtemp())
session_id = agent.session_id
for prompt in ("create notes.txt", "notes.txt: v2", "create extra.txt"):
    agent.send(prompt)
other_id = "other"
for prompt in ("create other.txt", "other.txt: v2"):
    agent.send(prompt, session_id=other_id)
seq = agent.list_checkpoints(other_id)[1].seq  # the second prompt, at this seq in both sessions

# The README's block (tests/test_examples.py checks that it is the same there):
for cp in agent.list_checkpoints():  # oldest first
    print(cp.seq, cp.prompt, cp.files, cp.unavailable_files)
result = agent.restore(
    agent.session_id, cp.seq
)  # RestoreResult(restored_files, conversation_restored)
agent.restore(other_id, seq)  # any session; the current one stays current
agent.restore(session_id, seq, conversation=False)  # the files only
agent.restore(session_id, seq, files=False)  # the conversation only
# (end of the README's block)

print("restored:", result.restored_files, result.conversation_restored)
for name in ("notes.txt", "extra.txt", "other.txt"):
    print(f"{name}:", (work / name).read_text().strip() if (work / name).exists() else None)
print("conversation:", [c.prompt for c in agent.list_checkpoints()])
print("other conversation:", [c.prompt for c in agent.list_checkpoints(other_id)])
agent.close()
