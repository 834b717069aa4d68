import asyncio

from liteagent.eventlog import sqlite_checkpointer
from liteagent.providers import anthropic
from liteagent.sdk import create_async_lite_agent


async def serve(work: dict[str, str]) -> None:  # session id -> prompt
    async with create_async_lite_agent(
        model=anthropic(),
        model_name="claude-sonnet-4-5",
        checkpointer=sqlite_checkpointer("sessions.db"),
        max_live_sessions=256,
        max_queued_sends=10_000,
        idle_timeout_s=300,
    ) as agent:
        await asyncio.gather(*(agent.send(p, session_id=sid) for sid, p in work.items()))
        print(agent.host_stats())  # HostStats(live, running, queued, stopping, ...)


asyncio.run(serve({"fix-tests": "Make the tests pass", "docs": "Document utils.py"}))
