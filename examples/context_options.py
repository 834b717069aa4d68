"""The README's "Context engine" block, run offline: the ``provider`` it names is a scripted
model here, and the agent's workspace and home are temporary folders.

Run: python examples/context_options.py
"""

from __future__ import annotations

import os
import tempfile

from liteagent.eventlog import file_checkpointer
from liteagent.eventlog.types import AssistantMessage, ContextStatus, TextBlock
from liteagent.providers import scripted

os.chdir(tempfile.mkdtemp())  # the agent's workspace: create_lite_agent's workdir is "."
os.environ["LITE_AGENT_HOME"] = tempfile.mkdtemp()  # where its sessions are stored
provider = scripted([AssistantMessage(content=(TextBlock("hello"),), stop_reason="end_turn")])

# The README's block (tests/test_examples.py checks that it is the same there):
from liteagent.context import ContextOptions
from liteagent.sdk import create_lite_agent

agent = create_lite_agent(
    model=provider,
    model_name="claude-sonnet-4-5",
    context=ContextOptions(budget_tokens=120_000, idle_compact_after=300),
)
# (end of the README's block)

with agent:
    print(agent.send("hi").text)
    session_id = agent.session_id
with file_checkpointer() as store:  # the agent's default store: the workspace's sessions
    for stored in store.read(session_id):
        if isinstance(stored.body, ContextStatus):
            print("context_status: level", stored.body.level, "budget", stored.body.budget)
