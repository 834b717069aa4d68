"""Time travel offline: a scripted model edits files over three prompts, then we preview a
restore, restore, and undo the restore.

Run: python examples/time_travel.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from liteagent.eventlog import memory_checkpointer
from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolUseBlock
from liteagent.providers import scripted
from liteagent.sdk import RestoreRefusedError, create_lite_agent


def call(n: int, tool: str, **input: str) -> AssistantMessage:
    return AssistantMessage(content=(ToolUseBlock(f"t{n}", tool, input),), stop_reason="tool_use")


def done(text: str) -> AssistantMessage:
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="liteagent-tt-"))
    (work / "notes.md").write_text("# Notes\n")
    model = scripted(
        [
            call(1, "write_file", path="app.py", content="print('v1')\n"),
            done("created app.py"),
            call(2, "edit_file", path="app.py", old_string="v1", new_string="v2"),
            done("edited"),
            call(3, "delete_file", path="notes.md"),
            done("deleted notes.md"),
        ]
    )
    with create_lite_agent(
        model=model, model_name="scripted", workdir=work, checkpointer=memory_checkpointer()
    ) as agent:
        for prompt in ("create app.py", "make it v2", "remove the notes"):
            print(prompt, "->", agent.send(prompt).text)
        for cp in agent.list_checkpoints():
            print(f"checkpoint {cp.seq}: {cp.prompt!r} would put back {list(cp.files)}")

        (work / "app.py").write_text("print('my own edit')\n")  # the user changes a file
        second = agent.list_checkpoints()[1]
        try:
            agent.restore(agent.session_id, second.seq)
        except RestoreRefusedError as e:
            print("refused:", e.problems)

        (work / "app.py").write_text("print('v2')\n")  # put it back as the agent left it
        preview = agent.restore(agent.session_id, second.seq, dry_run=True)
        print("would put back:", [(c.path, c.action) for c in preview.changes])
        result = agent.restore(agent.session_id, second.seq)
        print("restored:", list(result.restored_files))
        print("app.py:", (work / "app.py").read_text().strip())
        print("notes.md back:", (work / "notes.md").exists())
        print("conversation:", [c.prompt for c in agent.list_checkpoints()])

        agent.undo_restore(agent.session_id)  # one prompt too far: bring it all back
        print("after undo, app.py:", (work / "app.py").read_text().strip())
        print("after undo, conversation:", [c.prompt for c in agent.list_checkpoints()])


if __name__ == "__main__":
    main()
