"""The README's "Context compaction" block, run offline: the ``provider`` it names is a
scripted model here. It reads a file too large to keep in the context, then a small one, and
then says what the next request showed it in place of the large one.

Run: python examples/compaction_middleware.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from liteagent.context import SPILL_PREFIX
from liteagent.eventlog.types import AssistantMessage, ModelRequest, TextBlock, ToolUseBlock
from liteagent.providers import scripted


def reply(text: str) -> AssistantMessage:
    """The scripted model's answer: ``text``, ending its turn."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def read(call_id: str, path: str) -> AssistantMessage:
    """The scripted model asks to read ``path``."""
    call = ToolUseBlock(call_id, "read_file", {"path": path})
    return AssistantMessage(content=(call,), stop_reason="tool_use")


def answer(request: ModelRequest) -> AssistantMessage:
    """The scripted model's second answer: whether the file's content reached it as a spill
    marker, and the tools it was offered."""
    big = request.messages[2].content[0]  # the prompt, the first call, its result
    spilled = str(getattr(big, "content", "")).startswith(SPILL_PREFIX)
    return reply(f"spilled: {spilled}; tools: {sorted(t.name for t in request.tools)}")


os.chdir(tempfile.mkdtemp())  # the agent's workspace: create_agent's workdir is "."
Path("big.log").write_text("".join(f"{i:05} {'x' * 60}\n" for i in range(3000)))
Path("small.log").write_text("ok\n")
provider = scripted([read("t1", "big.log"), read("t2", "small.log"), answer])

# The README's block (tests/test_examples.py checks that it is the same there):
from liteagent.context import compaction, default_compactor, reactive_compaction
from liteagent.sdk import create_agent
from liteagent.tools import default_tools

agent = create_agent(
    model=provider,
    model_name="claude-sonnet-4-5",
    tools=default_tools(),
    use=[compaction(default_compactor()), reactive_compaction()],
)
# (end of the README's block)

with agent:
    print(agent.send("What is in big.log?").text)
