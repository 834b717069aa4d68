"""The SDK boundary: every public entry point of liteagent.sdk, fed wrong types and extreme
values, either works or raises a LiteAgentError, never a foreign exception; a refused prompt
records nothing."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liteagent.context import ContextOptions, default_compactor
from liteagent.eventlog import CancelToken, memory_checkpointer
from liteagent.eventlog.errors import InvalidArgumentError, LiteAgentError
from liteagent.eventlog.types import AssistantMessage, TextBlock
from liteagent.providers import scripted
from liteagent.sdk import (
    AsyncLiteAgent,
    AsyncSubscription,
    LiteAgent,
    Subscription,
    configure_logging,
    create_agent,
    create_async_lite_agent,
    create_lite_agent,
)
from liteagent.tools import bash, write_file

ANSWERS = 10_000
SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _reply(_: Any) -> AssistantMessage:
    return AssistantMessage(content=(TextBlock("ok"),), stop_reason="end_turn")


def _provider() -> Any:
    return scripted([_reply] * ANSWERS)


WRONG = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.binary(max_size=6),
    st.lists(st.none(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from(
        [
            "",
            " \n\t",
            "\udcff",
            "a\x00b",
            "x" * 5000,
            "../etc",
            object(),
            CancelToken(),
            Path("/nonexistent"),
            2**63,
            -1,
            0,
            float("nan"),
            _provider,
            memory_checkpointer,
        ]
    ),
)
"""Values of the wrong type, and extreme values of the right ones."""

NOT_TEXT = WRONG.filter(lambda v: not isinstance(v, str))


def _outcome(call: Callable[[], Any]) -> Any:
    """Run ``call``; its result, or the LiteAgentError it raised (anything else propagates)."""
    try:
        return call()
    except LiteAgentError as e:
        return e


# -- the factories --------------------------------------------------------------------------------


def _paths(tmp_path: Path) -> st.SearchStrategy[Any]:
    """Wrong workdir / home values that never name a usable folder outside ``tmp_path``."""
    afile = tmp_path / "a-file"
    afile.write_text("x")
    return st.one_of(
        NOT_TEXT,
        st.sampled_from(
            [
                "",
                "\x00",
                "a\x00b",
                "\udcff",
                str(tmp_path / "missing"),
                str(afile),
                afile,
                str(afile / "below"),
                b"bytes",
            ]
        ),
    )


def _factory_values(tmp_path: Path) -> dict[str, st.SearchStrategy[Any]]:
    return {
        "model": WRONG,
        "model_name": WRONG,
        "workdir": _paths(tmp_path),
        "checkpointer": WRONG,
        "sessions": WRONG,
        "tools": st.one_of(
            WRONG,
            st.lists(st.one_of(WRONG, st.just(bash)), max_size=3),
            st.just([bash, bash]),
            st.just("bash"),
        ),
        "system_prompt": WRONG,
        "context": st.one_of(
            WRONG,
            st.dictionaries(
                st.sampled_from(
                    [
                        "budget_tokens",
                        "archive_threshold_bytes",
                        "planner",
                        "idle_compact_after",
                        "window_tokens",
                        "native_edits",
                        "nope",
                        5,
                    ]
                ),
                WRONG,
                max_size=2,
            ),
        ),
        "home": _paths(tmp_path),
        "max_turns": WRONG,
        "max_tokens": WRONG,
        "max_live_sessions": WRONG,
        "max_queued_sends": WRONG,
        "idle_timeout_s": WRONG,
        "compactor": WRONG,
        "use": st.one_of(WRONG, st.lists(WRONG, max_size=2)),
    }


def _valid(tmp_path: Path) -> dict[str, Any]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return {
        "model": _provider(),
        "model_name": "m",
        "workdir": work,
        "home": tmp_path / "home",
        "tools": [write_file],
        "use": [],
    }


FACTORIES = [create_lite_agent, create_async_lite_agent, create_agent]


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__)
@SETTINGS
@given(data=st.data())
def test_factories_raise_only_library_errors(tmp_path: Path, factory: Any, data: Any) -> None:
    """One argument of a factory replaced by a wrong or extreme value: the agent is created
    (and closed) or a LiteAgentError is raised."""
    params = [p for p in inspect.signature(factory).parameters if p in _factory_values(tmp_path)]
    name = data.draw(st.sampled_from(params), label="parameter")
    kwargs = {k: v for k, v in _valid(tmp_path).items() if k in params}
    kwargs[name] = data.draw(_factory_values(tmp_path)[name], label=name)
    agent = _outcome(lambda: factory(**kwargs))
    if isinstance(agent, LiteAgent):
        agent.close()
    elif isinstance(agent, AsyncLiteAgent):
        asyncio.run(agent.close())


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("tools", "bash"),
        ("tools", [None]),
        ("workdir", None),
        ("system_prompt", 5),
        ("compactor", 5),
        ("max_queued_sends", -1),
        ("idle_timeout_s", 0),
        ("idle_timeout_s", "3"),
        ("max_live_sessions", True),
        ("context", {"budget_tokens": "x"}),
        ("tools", [bash, bash]),
    ],
)
def test_factory_refuses_with_invalid_argument(tmp_path: Path, name: str, value: Any) -> None:
    """The reported bad factory arguments raise InvalidArgumentError at once."""
    kwargs = _valid(tmp_path)
    del kwargs["use"]
    kwargs[name] = value
    with pytest.raises(InvalidArgumentError):
        create_lite_agent(**kwargs)


def test_a_valid_compactor_is_accepted(tmp_path: Path) -> None:
    """A Compactor instance passes the check that refuses other objects."""
    kwargs = _valid(tmp_path)
    del kwargs["use"]
    with create_lite_agent(compactor=default_compactor(max_tokens=None), **kwargs) as agent:
        assert isinstance(agent, LiteAgent)


# -- the agents' methods --------------------------------------------------------------------------


SESSION = st.one_of(WRONG, st.text(max_size=10), st.just("s1"))
METHODS: dict[str, dict[str, tuple[Any, st.SearchStrategy[Any]]]] = {
    "send": {
        "input": ("hi", st.one_of(WRONG, st.text(max_size=20))),
        "session_id": (None, SESSION),
        "cancel": (None, WRONG),
    },
    "resume": {"session_id": ("s1", SESSION)},
    "delete_session": {"session_id": ("gone", SESSION)},
    "list_checkpoints": {"session_id": (None, SESSION)},
    "restore": {
        "session_id": ("s1", SESSION),
        "seq": (1, WRONG),
        "files": (True, WRONG),
        "conversation": (True, WRONG),
        "cancel": (None, WRONG),
    },
    "pending_restore": {"session_id": (None, SESSION)},
    "finish_restore": {"session_id": (None, SESSION)},
    "rollback_restore": {"session_id": (None, SESSION)},
    "compact": {
        "instructions": (None, WRONG),
        "session_id": (None, SESSION),
        "cancel": (None, WRONG),
    },
    "iter_compact": {
        "instructions": (None, WRONG),
        "session_id": (None, SESSION),
        "cancel": (None, WRONG),
    },
    "subscribe": {"maxsize": (16, WRONG), "session_id": (None, SESSION)},
}


def _finish(result: Any) -> Any:
    """Consume what a method returned that holds resources (an iterator, a subscription)."""
    if isinstance(result, (Subscription, AsyncSubscription)):
        result.close()
    elif hasattr(result, "__iter__") and hasattr(result, "stats"):
        return _outcome(lambda: list(result))
    return result


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[LiteAgent]:
    """A LiteAgent on a memory log whose model always answers "ok"."""
    with create_lite_agent(
        model=_provider(), model_name="m", workdir=tmp_path, checkpointer=memory_checkpointer()
    ) as a:
        yield a


@pytest.mark.parametrize("method", sorted(METHODS))
@SETTINGS
@given(data=st.data())
def test_methods_raise_only_library_errors(agent: LiteAgent, method: str, data: Any) -> None:
    """One argument of a LiteAgent method replaced by a wrong or extreme value: it works or
    raises a LiteAgentError."""
    spec = METHODS[method]
    name = data.draw(st.sampled_from(sorted(spec)), label="parameter")
    kwargs = {k: v for k, (v, _) in spec.items()}
    kwargs[name] = data.draw(spec[name][1], label=name)
    _finish(_outcome(lambda: getattr(agent, method)(**kwargs)))


@pytest.fixture
def async_agent(tmp_path: Path) -> Iterator[AsyncLiteAgent]:
    """An AsyncLiteAgent on a memory log whose model always answers "ok"."""
    a = create_async_lite_agent(
        model=_provider(), model_name="m", workdir=tmp_path, checkpointer=memory_checkpointer()
    )
    try:
        yield a
    finally:
        asyncio.run(a.close())


async def _async_call(agent: AsyncLiteAgent, method: str, kwargs: dict[str, Any]) -> Any:
    result = getattr(agent, method)(**kwargs)
    if isinstance(result, AsyncSubscription):
        return result
    if hasattr(result, "__aiter__"):
        return [event async for event in result]
    if inspect.isawaitable(result):
        return await result
    return result


@pytest.mark.parametrize("method", sorted(METHODS))
@SETTINGS
@given(data=st.data())
def test_async_methods_raise_only_library_errors(
    async_agent: AsyncLiteAgent, method: str, data: Any
) -> None:
    """The same for AsyncLiteAgent's methods."""
    spec = METHODS[method]
    name = data.draw(st.sampled_from(sorted(spec)), label="parameter")
    kwargs = {k: v for k, (v, _) in spec.items()}
    kwargs[name] = data.draw(spec[name][1], label=name)
    _finish(_outcome(lambda: asyncio.run(_async_call(async_agent, method, kwargs))))


def test_methods_without_arguments_work(agent: LiteAgent) -> None:
    """clear, list_sessions, background_tasks and host_stats need no argument and work."""
    assert agent.clear() == agent.session_id
    assert [] == agent.list_sessions()
    assert [] == agent.background_tasks()
    assert 0 == agent.host_stats().running


# -- the reported cases ---------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", [None, 5, b"x", "\udcff", "", "   ", "\n\t "])
def test_a_bad_prompt_is_refused_and_nothing_recorded(agent: LiteAgent, prompt: Any) -> None:
    """send() of a non-string, an unencodable or an empty/whitespace prompt raises
    InvalidArgumentError and records nothing; the session then works."""
    with pytest.raises(InvalidArgumentError):
        agent.send(prompt)
    assert 0 == agent._core.checkpointer.head(agent.session_id)
    assert "ok" == agent.send("hello").text


def test_a_bad_cancel_is_refused(agent: LiteAgent) -> None:
    """send(cancel="x") raises InvalidArgumentError (not AttributeError), recording nothing."""
    with pytest.raises(InvalidArgumentError):
        agent.send("hi", cancel="x")  # type: ignore[arg-type]
    assert 0 == agent._core.checkpointer.head(agent.session_id)


@pytest.mark.parametrize(
    "call",
    [
        lambda a: a.resume(5),
        lambda a: a.restore("s1", "3"),
        lambda a: a.restore("s1", 0),
        lambda a: a.restore("s1", 1, files="yes"),
        lambda a: a.subscribe(0),
        lambda a: a.subscribe(-1),
        lambda a: a.subscribe(2.5),
        lambda a: a.subscribe(True),
        lambda a: a.compact(5),
        lambda a: a.delete_session(None),
    ],
    ids=[
        "resume-int",
        "restore-str-seq",
        "restore-zero",
        "restore-files-str",
        "subscribe-0",
        "subscribe-neg",
        "subscribe-float",
        "subscribe-bool",
        "compact-int",
        "delete-none",
    ],
)
def test_reported_bad_arguments_are_library_errors(agent: LiteAgent, call: Any) -> None:
    """The reported bad method arguments raise a LiteAgentError."""
    with pytest.raises(LiteAgentError):
        call(agent)


@pytest.mark.parametrize("value", [-1, float("nan"), "1", True])
def test_subscription_get_refuses_a_bad_timeout(agent: LiteAgent, value: Any) -> None:
    """Subscription.get(timeout) with a negative, NaN or non-number timeout raises
    InvalidArgumentError."""
    with agent.subscribe(4) as sub, pytest.raises(InvalidArgumentError):
        sub.get(value)


@pytest.mark.parametrize(
    ("json", "level"),
    [("yes", "INFO"), (False, "LOUD"), (False, 5.5), (None, "INFO"), (False, None)],
)
def test_configure_logging_refuses_bad_arguments(json: Any, level: Any) -> None:
    """configure_logging with a non-bool json or an unknown level raises InvalidArgumentError
    (before configuring anything)."""
    with pytest.raises(InvalidArgumentError):
        configure_logging(json=json, level=level)


def test_context_options_instance_is_accepted(tmp_path: Path) -> None:
    """context=ContextOptions(...) passes the factory's checks."""
    kwargs = _valid(tmp_path)
    del kwargs["use"]
    with create_lite_agent(context=ContextOptions(budget_tokens=5000), **kwargs) as agent:
        assert "ok" == agent.send("hi").text
