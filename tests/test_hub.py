"""The live-event hub with many subscriptions, and with subscriptions their owners dropped.

A subscription dropped without ``close()`` (a handler that failed before its close) stayed in
the hub for the agent's lifetime, its buffer filled with events for nobody, and every publish
offered each event to it (1,000 of them made turns 300 times slower). Subscribing and closing
rebuilt the hub's tuple of subscribers each time (30,000 of them: 7 s to subscribe, 19 s to
close, on the event loop)."""

from __future__ import annotations

import gc
from pathlib import Path

from _restore_model import reply

from liteagent.actors import EventHub
from liteagent.actors._hub import LiveEvent
from liteagent.eventlog import memory_checkpointer
from liteagent.providers import scripted
from liteagent.sdk import create_lite_agent


def _held(hub: EventHub) -> int:
    return sum(1 for group in hub._groups.values() for ref in group.values() if ref() is not None)


def test_a_dropped_subscription_is_released() -> None:
    """Subscriptions nobody references any more (blocking and async, of all sessions and of
    one) leave the hub; the one kept still gets its events, and leaves when closed."""
    hub = EventHub()
    kept = hub.subscribe(maxsize=4)
    for i in range(100):
        hub.subscribe(maxsize=4, session_id=f"s{i % 3}")
        hub.subscribe_async(maxsize=4)
    gc.collect()
    hub.publish(LiveEvent("s1", "x"))
    assert 1 == _held(hub)
    assert {None} == set(hub._groups)
    assert "x" == kept.get(0).event  # type: ignore[union-attr]
    kept.close()
    assert 0 == _held(hub)


def test_many_subscriptions_each_get_their_sessions_events() -> None:
    """Thousands of subscriptions, closed in any order: each gets exactly the events of its
    session (or of all) published while it was open."""
    hub = EventHub()
    subs = [
        hub.subscribe(maxsize=8, session_id=None if i % 5 == 0 else f"s{i % 7}")
        for i in range(5_000)
    ]
    hub.publish(LiveEvent("s1", 1))
    for sub in subs[::2]:
        sub.close()
    hub.publish(LiveEvent("s1", 2))
    for i, sub in enumerate(subs):
        got = []
        while (item := sub.get(0)) is not None:
            got.append(item.event)  # type: ignore[union-attr]
        follows = sub.session_id in (None, "s1")
        expected = [] if not follows else [1] if i % 2 == 0 else [1, 2]
        assert expected == got, (i, sub.session_id)
    hub.close()
    assert 0 == _held(hub)
    assert all(sub.closed for sub in subs)


def test_an_agents_dropped_subscriptions_no_longer_take_its_events(tmp_path: Path) -> None:
    """200 subscriptions an agent's caller dropped: the agent's hub holds only the one still
    in use while a turn runs."""
    with create_lite_agent(
        model=scripted([reply(str(i)) for i in range(3)]),
        model_name="m",
        workdir=tmp_path,
        checkpointer=memory_checkpointer(),
    ) as agent:
        for _ in range(200):
            agent.subscribe(maxsize=1024)
        gc.collect()
        with agent.subscribe() as sub:
            agent.send("hello")
            assert sub.get(0) is not None
            assert 1 == _held(agent._core.hub)
