from liteagent.providers import anthropic
from liteagent.sdk import create_lite_agent

with create_lite_agent(model=anthropic(), model_name="claude-sonnet-4-5", workdir=".") as agent:
    result = agent.send("Add a docstring to every function in utils.py")
    print(result.text, result.usage, result.stop_reason)
