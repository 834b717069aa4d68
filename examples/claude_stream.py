from liteagent.eventlog import CancelToken
from liteagent.eventlog.types import (
    Message,
    ModelRequest,
    ResponseComplete,
    TextBlock,
    TextDelta,
    ToolSchema,
)
from liteagent.providers import anthropic

provider = anthropic()  # ANTHROPIC_API_KEY (and optionally ANTHROPIC_BASE_URL) from the environment
request = ModelRequest(
    model="claude-sonnet-4-5",
    system="You are a careful coding agent.",
    messages=(Message("user", (TextBlock("List the Python files."),)),),
    tools=(
        ToolSchema(
            name="bash",
            description="Run a command",
            input_schema={"type": "object", "properties": {"command": {"type": "string"}}},
        ),
    ),
    max_tokens=4096,
)
for event in provider.stream(request, cancel=CancelToken()):
    if isinstance(event, TextDelta):
        print(event.text, end="", flush=True)
    elif isinstance(event, ResponseComplete):
        reply = event.response.message  # an AssistantMessage event, ready to append to the log
