import asyncio

from liteagent.providers import anthropic
from liteagent.sdk import create_async_lite_agent


async def main() -> None:
    async with create_async_lite_agent(model=anthropic(), model_name="claude-sonnet-4-5") as agent:
        results = await asyncio.gather(
            *(agent.send(f"Summarize {name}", session_id=name) for name in ("a.py", "b.py", "c.py"))
        )
        print([result.text for result in results])


asyncio.run(main())
