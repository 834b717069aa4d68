"""The README's "Preview" block, run offline: a scripted model writes a file, then runs a
shell command and edits the file; the block previews a restore to before the second prompt.

Run: python examples/time_travel_preview.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolUseBlock
from liteagent.providers import scripted
from liteagent.sdk import create_lite_agent


def call(call_id: str, tool: str, **input: str) -> AssistantMessage:
    """The scripted model asks for one tool call."""
    return AssistantMessage(content=(ToolUseBlock(call_id, tool, input),), stop_reason="tool_use")


def reply(text: str) -> AssistantMessage:
    """The scripted model's answer: ``text``, ending its turn."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


work = Path(tempfile.mkdtemp())
model = scripted(
    [
        call("t1", "write_file", path="app.py", content="print('v1')\n"),
        reply("created app.py"),
        call("t2", "bash", command="echo started > log.txt"),
        call("t3", "edit_file", path="app.py", old_string="v1", new_string="v2"),
        reply("logged and edited"),
    ]
)
agent = create_lite_agent(model=model, model_name="scripted", workdir=work, home=tempfile.mkdtemp())
agent.send("create app.py")
agent.send("log, then make it v2")
session_id = agent.session_id
seq = agent.list_checkpoints()[1].seq  # before "log, then make it v2"

# The README's block (tests/test_examples.py checks that it is the same there):
preview = agent.restore(session_id, seq, dry_run=True)  # changes nothing
preview.changes  # FileChange(path, action, size_now, size_after, added_lines, removed_lines)
preview.refused  # (path, reason) for each file a restore would refuse now
preview.events_removed
for e in preview.side_effects:  # SideEffect: what ran after the checkpoint, not undoable
    print(e.ts, e.tool, e.summary, e.status, e.exit_code)
agent.list_checkpoints()[0].side_effects  # their count, shown by /checkpoints too
# (end of the README's block)

print("changes:", [(c.path, c.action, c.added_lines, c.removed_lines) for c in preview.changes])
print("refused:", list(preview.refused))
print("events removed:", preview.events_removed > 0)
print("side effects after each checkpoint:", [c.side_effects for c in agent.list_checkpoints()])
print("app.py still:", (work / "app.py").read_text().strip())
agent.close()
