"""An int of thousands of digits, where a number or a session id is expected, is refused with a
LiteAgentError in a short message: it is compared, never converted to a float (OverflowError)
or shown in full (Python refuses to write an int past 4,300 digits, a ValueError)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from liteagent.eventlog import collect_garbage, memory_checkpointer
from liteagent.eventlog.errors import LiteAgentError
from liteagent.eventlog.types import AssistantMessage, TextBlock
from liteagent.providers import scripted
from liteagent.sdk import LiteAgent, create_lite_agent

HUGE = 10**5000

CALLS: dict[str, Callable[[LiteAgent, str], Any]] = {
    "restore": lambda a, sid: a.restore(sid, HUGE),
    "restore dry run": lambda a, sid: a.restore(sid, HUGE, dry_run=True),
    "fork": lambda a, sid: a.fork(sid, HUGE),
    "collect_garbage grace": lambda a, sid: a.collect_garbage(grace=HUGE),
    "collect_garbage branch_retention": lambda a, sid: a.collect_garbage(branch_retention=HUGE),
    "list_checkpoints": lambda a, sid: a.list_checkpoints(HUGE),  # type: ignore[arg-type]
    "send session_id": lambda a, sid: a.send("hi", session_id=HUGE),  # type: ignore[arg-type]
    "subscribe timeout": lambda a, sid: a.subscribe().get(timeout=-HUGE),
}


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
def test_a_huge_int_is_refused_in_a_short_message(
    tmp_path: Path, call: Callable[[LiteAgent, str], Any]
) -> None:
    """Each call raises a LiteAgentError whose message stays short."""
    reply = AssistantMessage(content=(TextBlock("ok"),), stop_reason="end_turn")
    with create_lite_agent(
        model=scripted([reply]),
        model_name="m",
        workdir=tmp_path,
        checkpointer=memory_checkpointer(),
    ) as agent:
        agent.send("hi")
        with pytest.raises(LiteAgentError) as raised:
            call(agent, agent.session_id)
    assert len(str(raised.value)) < 400


def test_the_collector_refuses_a_huge_grace_before_reading(tmp_path: Path) -> None:
    """collect_garbage itself (the eventlog function) refuses it as well."""
    with memory_checkpointer() as cp, pytest.raises(LiteAgentError, match="an int of"):
        collect_garbage(cp, grace=HUGE)
