"""A session's log: append events, resume by folding, time-travel by truncating.

Run: python examples/eventlog_quickstart.py [--backend file|sqlite] [--root DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from liteagent.eventlog import (
    conversation,
    file_checkpointer,
    fold,
    messages_to_dicts,
    sqlite_checkpointer,
)
from liteagent.eventlog.errors import CheckpointConflictError
from liteagent.eventlog.types import (
    AssistantMessage,
    SessionStarted,
    TextBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserPrompt,
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["file", "sqlite"], default="file")
    parser.add_argument("--root", default=None)
    args = parser.parse_args()
    root = Path(args.root or tempfile.mkdtemp(prefix="liteagent-"))
    cp = (
        file_checkpointer(root / "sessions")
        if args.backend == "file"
        else sqlite_checkpointer(root / "log.db")
    )
    with cp:
        # One atomic append per step of a turn; the conversation is computed from the log.
        head = cp.append(
            "demo",
            [
                SessionStarted(workdir=str(root), model="claude-sonnet-4-5"),
                UserPrompt(content=(TextBlock("List the files."),)),
            ],
        )
        head = cp.append(
            "demo",
            [
                AssistantMessage(
                    content=(ToolUseBlock("toolu_1", "bash", {"command": "ls"}),),
                    usage=Usage(input_tokens=120, output_tokens=15),
                    stop_reason="tool_use",
                ),
                ToolResult(block=ToolResultBlock("toolu_1", "README.md\nsrc/")),
            ],
            expected_head=head,
        )
        cp.append("demo", [UserPrompt(content=(TextBlock("Now delete src/."),))])

        # Resume = read + fold; the state knows the checkpoints (user prompts).
        state = fold(cp.read("demo"))
        print("head:", state.head, "checkpoints:", [(c.seq, c.prompt) for c in state.checkpoints])
        print("messages:", messages_to_dicts(conversation(state)))

        # Time travel: drop everything from the second prompt on, guarded by the position.
        position = cp.position("demo")
        second = state.checkpoints[1]
        cp.truncate(
            "demo",
            second.seq - 1,
            expected_head=position.head,
            expected_generation=position.generation,
        )
        print("after restore:", [e.kind for e in cp.read("demo")])

        # A writer that saw the old history cannot append onto the new one (no ABA).
        try:
            cp.append(
                "demo",
                [UserPrompt(content=(TextBlock("stale"),))],
                expected_head=position.head,
                expected_generation=position.generation,
            )
        except CheckpointConflictError as e:
            print("stale writer refused:", e)
        print("integrity:", cp.check_integrity().ok, "sessions:", [s.id for s in cp.list()])


if __name__ == "__main__":
    main()
