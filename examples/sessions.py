"""The README's "Sessions" block, run offline: an agent with a scripted model and a store in
a temporary folder, with two stored sessions, gets the block's calls.

Run: python examples/sessions.py
"""

from __future__ import annotations

import tempfile

from liteagent.eventlog.types import AssistantMessage, TextBlock
from liteagent.providers import scripted
from liteagent.sdk import create_lite_agent


def reply(text: str) -> AssistantMessage:
    """The scripted model's answer: ``text``, ending its turn."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


model = scripted([reply("hello"), reply("hello again")])
agent = create_lite_agent(
    model=model, model_name="scripted", workdir=tempfile.mkdtemp(), home=tempfile.mkdtemp()
)
agent.send("hi")  # stored as the current session
some_id = agent.session_id
agent.send("hi there", session_id="kept")  # another stored session
print("stored before:", sorted(s.id for s in agent.list_sessions()) == sorted([some_id, "kept"]))

# The README's block (tests/test_examples.py checks that it is the same there):
agent.session_id  # the current session
agent.resume("20261129-224501-3f9a1c")  # continue a stored session (an unknown id starts empty)
agent.clear()  # a new empty session; the old transcript stays stored
agent.list_sessions()  # SessionInfo(id, mtime), newest first
agent.delete_session(some_id)
agent.background_tasks()  # running `bash(run_in_background=true)` commands
with agent.subscribe() as events:  # live events: text deltas, tool calls, turn ends
    ...
agent.subscribe(session_id=some_id)  # the live events of one session only
# (end of the README's block)

print("stored after:", [s.id for s in agent.list_sessions()])
print("current is new:", agent.session_id not in (some_id, "kept", "20261129-224501-3f9a1c"))
print("background tasks:", agent.background_tasks())
agent.close()
