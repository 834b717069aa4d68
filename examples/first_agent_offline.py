import tempfile

from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolUseBlock
from liteagent.providers import scripted
from liteagent.sdk import create_lite_agent

model = scripted(
    [
        AssistantMessage(
            content=(
                ToolUseBlock("t1", "write_file", {"path": "hello.py", "content": "print('hi')\n"}),
            ),
            stop_reason="tool_use",
        ),
        AssistantMessage(content=(TextBlock("Created hello.py."),), stop_reason="end_turn"),
    ]
)
with create_lite_agent(
    model=model, model_name="scripted", workdir=tempfile.mkdtemp(), sessions=False
) as agent:
    print(agent.send("Create hello.py").text)  # the real write_file tool ran
