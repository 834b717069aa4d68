"""The constructors of the public API: create_lite_agent, create_async_lite_agent, create_agent."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from liteagent.context import (
    Compactor,
    ContextOptions,
    blob_spill_store,
    default_compactor,
    micro_pass,
    snip_pass,
    tool_result_budget_pass,
)
from liteagent.eventlog import Checkpointer, file_checkpointer, memory_checkpointer
from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError, LiteAgentError
from liteagent.providers import ModelProvider
from liteagent.tools import Tool, ToolEnv, default_tools
from liteagent.tools import context as context_tool

from ._agent import LiteAgent
from ._async_agent import AsyncLiteAgent
from ._core import MAX_OPERATIONS, AgentCore
from ._prompt import DEFAULT_SYSTEM_PROMPT
from ._validate import (
    check_bool,
    check_count,
    check_path,
    check_seconds,
    check_sequence,
    check_text,
    check_workdir,
)

__all__ = ["create_agent", "create_async_lite_agent", "create_lite_agent"]

DEFAULT_MAX_TURNS = 50
DEFAULT_MAX_QUEUED_SENDS = 10_000
DEFAULT_IDLE_TIMEOUT_S = 300.0
DEFAULT_MAX_BACKGROUND_TASKS = 64


_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def _check_tool(tool: Tool, where: str) -> None:
    """Refuse a tool the model could not be sent (a subclass of :class:`Tool` sets these
    itself): a name not matching ``[a-zA-Z0-9_-]{1,64}``, a description that is not text, an
    input schema that is not a JSON object, a ``read_only`` that is not a bool."""
    name = getattr(tool, "name", None)
    if type(name) is not str or not _TOOL_NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"{where}.name must be a str matching [a-zA-Z0-9_-]{{1,64}}, got {shown(name)}"
        )
    description = getattr(tool, "description", None)
    if type(description) is not str:
        raise InvalidArgumentError(
            f"{where} ({name!r}).description must be a str, got {shown(description)}"
        )
    check_text(description, f"{where} ({name!r}).description")
    if type(getattr(tool, "read_only", None)) is not bool:
        raise InvalidArgumentError(
            f"{where} ({name!r}).read_only must be True or False, got {shown(tool.read_only)}"
        )
    try:
        schema = tool.input_schema
    except Exception as e:
        raise InvalidArgumentError(
            f"{where} ({name!r}).input_schema cannot be read: {type(e).__name__}: {e}"
        ) from e
    if type(schema) is not dict:
        raise InvalidArgumentError(
            f"{where} ({name!r}).input_schema must be a dict (a JSON Schema object), got "
            f"{type(schema).__name__}"
        )
    try:
        json.dumps(schema, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidArgumentError(
            f"{where} ({name!r}).input_schema is not JSON: {type(e).__name__}: {e}"
        ) from None
    try:  # what each request (and its record in the log) does with it
        msgspec.msgpack.encode(schema)
        msgspec.json.encode(schema)
    except Exception as e:  # noqa: BLE001 -- a str subclass or a key that is no str, say
        raise InvalidArgumentError(
            f"{where} ({name!r}).input_schema cannot be sent or recorded (only plain JSON "
            f"values: str keys, ints of at most 64 bits): {type(e).__name__}: {e}"
        ) from None


def _check_tools(tools: object) -> list[Tool] | None:
    if tools is None:
        return None
    checked: list[Tool] = check_sequence(tools, "tools", Tool)
    for i, t in enumerate(checked):
        _check_tool(t, f"tools[{i}]")
    names = [t.name for t in checked]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidArgumentError(f"tools must have distinct names; given twice: {twice}")
    return checked


def _check_middleware(use: object) -> list[Any]:
    items = check_sequence(use, "use", object)
    for i, item in enumerate(items):
        hooks = [getattr(item, h, None) for h in ("before_model", "wrap_model_call")]
        if not any(callable(h) for h in hooks):
            raise InvalidArgumentError(
                f"use[{i}] must have a before_model or wrap_model_call method, "
                f"got {type(item).__name__}"
            )
    return items


def _core(
    *,
    model: ModelProvider,
    model_name: str,
    workdir: str | os.PathLike[str],
    checkpointer: Checkpointer | None,
    sessions: bool,
    tools: Sequence[Tool] | None,
    system_prompt: str | None,
    home: str | os.PathLike[str] | None,
    max_turns: int,
    max_tokens: int,
    max_live_sessions: int,
    middleware: Sequence[Any],
    compactor: Compactor | None = None,
    memory_default: bool = False,
    spill_by_default: bool = True,
    context: ContextArg = False,
    max_queued_sends: int = DEFAULT_MAX_QUEUED_SENDS,
    idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
    tool_env: ToolEnv | None = None,
    max_background_tasks: int = DEFAULT_MAX_BACKGROUND_TASKS,
    max_operations: int = MAX_OPERATIONS,
) -> AgentCore:
    """Check every argument (nothing is created before they all pass), then build the core."""
    if not isinstance(model, ModelProvider):
        raise InvalidArgumentError(f"model must be a ModelProvider, got {type(model).__name__}")
    checked_name = check_text(model_name, "model_name")  # a plain str
    if not checked_name:
        raise InvalidArgumentError("model_name must be a non-empty string")
    model_name = checked_name
    for name, value in (
        ("max_turns", max_turns),
        ("max_tokens", max_tokens),
        ("max_live_sessions", max_live_sessions),
    ):
        check_count(value, name)
    check_count(max_queued_sends, "max_queued_sends", minimum=0)
    check_count(max_background_tasks, "max_background_tasks", minimum=0)
    check_count(max_operations, "max_operations")
    idle = check_seconds(idle_timeout_s, "idle_timeout_s")
    check_bool(sessions, "sessions")
    system_prompt = check_text(system_prompt, "system_prompt", optional=True)  # a plain str
    checked_tools = _check_tools(tools)
    if tool_env is not None:
        if not isinstance(tool_env, ToolEnv):
            raise InvalidArgumentError(
                f"tool_env must be None or a ToolEnv (see tool_env()), got "
                f"{type(tool_env).__name__}"
            )
        if checked_tools is not None:
            raise InvalidArgumentError(
                "tool_env applies to the default tools; with tools=..., build the shell tool "
                "with bash_tool(env) instead"
            )
    checked_use = _check_middleware(middleware)
    if compactor is not None and not isinstance(compactor, Compactor):
        raise InvalidArgumentError(
            f"compactor must be None or a Compactor, got {type(compactor).__name__}"
        )
    if checkpointer is not None and not isinstance(checkpointer, Checkpointer):
        raise InvalidArgumentError(
            f"checkpointer must be a Checkpointer, got {type(checkpointer).__name__}"
        )
    home = check_path(home, "home", optional=True)  # a plain str: fspath is called once
    options = context_options(context)
    if (
        options is not None
        and options.budget_tokens is None
        and options.window_tokens <= max_tokens
    ):
        raise InvalidArgumentError(
            f"max_tokens={max_tokens} reserves the whole context window "
            f"(window_tokens={options.window_tokens}), leaving no room for the conversation: "
            "lower max_tokens, or set the context option window_tokens (or budget_tokens) to "
            "what the model takes"
        )
    root = check_workdir(workdir)
    owns = checkpointer is None
    if checkpointer is None:
        checkpointer = (
            file_checkpointer(workdir=root, home=home)
            if sessions and not memory_default
            else memory_checkpointer()
        )
    try:
        given = default_tools(env=tool_env) if checked_tools is None else checked_tools
        reader = _offers_reader(given, checked_use, compactor, options, spill_by_default)
        if compactor is None:
            compactor = _default_compactor(checkpointer, spills=reader)
        return AgentCore(
            provider=model,
            model_name=model_name,
            workdir=root,
            checkpointer=checkpointer,
            owns_checkpointer=owns,
            sessions=sessions,
            tools=[*given, context_tool]
            if reader and all(t.name != context_tool.name for t in given)
            else list(given),
            system_prompt=system_prompt,
            middleware=checked_use,
            compactor=compactor,
            context=options,
            max_turns=max_turns,
            max_tokens=max_tokens,
            max_live_sessions=max_live_sessions,
            max_queued_sends=max_queued_sends,
            idle_timeout_s=idle,
            max_background_tasks=max_background_tasks,
            max_operations=max_operations,
        )
    except BaseException:
        if owns:
            checkpointer.close()
        raise


def _offers_reader(
    tools: Sequence[Tool],
    middleware: Sequence[Any],
    compactor: Compactor | None,
    options: ContextOptions | None,
    spill_by_default: bool,
) -> bool:
    """Whether the agent has the ``context`` tool: it was given the library's, or something
    it runs can show the model a marker naming it — the engine (archive markers), a middleware
    with a true ``spills`` attribute, or a compactor that spills (``Compactor.spills``; without
    a ``compactor``, whether the default one should: ``spill_by_default``, unless a tool of
    the caller's own has that name).

    A tool named ``context`` that is not the library's reader, beside something that shows
    such markers, raises :class:`InvalidArgumentError`: the markers would send the model to
    that tool for content it cannot read."""
    own = any(t.name == context_tool.name and t is not context_tool for t in tools)
    shows = [
        *(["the context engine (context=...)"] if options is not None else []),
        *(
            f"use[{i}] (a middleware that spills)"
            for i, mw in enumerate(middleware)
            if getattr(mw, "spills", False) is True
        ),
        *(["the compactor (it spills)"] if compactor is not None and compactor.spills else []),
    ]
    if own and shows:
        raise InvalidArgumentError(
            f"tools: the tool named {context_tool.name!r} is not liteagent's context reader, "
            f"but {shows[0]} shows the model markers telling it to read moved-out content "
            f"with the {context_tool.name!r} tool: rename that tool, or pass "
            "liteagent.tools.context instead of it"
        )
    return (
        bool(shows)
        or any(t is context_tool for t in tools)
        or (compactor is None and spill_by_default and not own)
    )


def _default_compactor(checkpointer: Checkpointer, *, spills: bool) -> Compactor:
    """What ``compact()`` runs by default: ``default_compactor(max_tokens=None)``, spilling into
    the checkpointer's blob store when the agent has the ``context`` tool to read it back, else
    dropping the large results it moves out (so no marker names a tool that is not there)."""
    if spills:
        return default_compactor(max_tokens=None, store=blob_spill_store(checkpointer.blobs))
    return default_compactor(
        [
            tool_result_budget_pass(200_000, None),
            snip_pass(max_tokens=None),
            micro_pass(max_tokens=None),
        ]
    )


ContextArg = ContextOptions | Mapping[str, Any] | bool | None
"""``context=``: :class:`ContextOptions`, a dict of its fields, ``True``/``None`` (the
defaults) or ``False`` (no engine: the model sees the raw folded conversation)."""


def context_options(context: ContextArg) -> ContextOptions | None:
    """The engine options ``context`` asks for (``None``: no engine)."""
    if context is None or context is True:
        return ContextOptions()
    if context is False:
        return None
    try:
        return ContextOptions.of(context)
    except (TypeError, ValueError) as e:
        text = str(e)
        if isinstance(e, LiteAgentError) and "context" in text:
            raise
        raise InvalidArgumentError(f"context: {text}") from e  # a field's error: name context


def _lite_core(*, context: ContextArg, system_prompt: str | None, **kwargs: Any) -> AgentCore:
    """The core of a create_lite_agent / create_async_lite_agent agent: defaults filled in."""
    prompt = DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt
    return _core(system_prompt=prompt, middleware=(), context=context, **kwargs)


def create_lite_agent(
    *,
    model: ModelProvider,
    model_name: str,
    workdir: str | os.PathLike[str] = ".",
    checkpointer: Checkpointer | None = None,
    sessions: bool = True,
    tools: Sequence[Tool] | None = None,
    system_prompt: str | None = None,
    context: ContextArg = None,
    home: str | os.PathLike[str] | None = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    max_tokens: int = 8192,
    max_live_sessions: int = 256,
    compactor: Compactor | None = None,
    max_queued_sends: int = DEFAULT_MAX_QUEUED_SENDS,
    idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
    tool_env: ToolEnv | None = None,
    max_background_tasks: int = DEFAULT_MAX_BACKGROUND_TASKS,
    max_operations: int = MAX_OPERATIONS,
) -> LiteAgent:
    """Create a coding agent on ``workdir``.

    ``model`` is a :class:`~liteagent.providers.ModelProvider` (e.g. ``anthropic()``) and
    ``model_name`` the model to call. ``checkpointer`` defaults to ``file_checkpointer()``
    under the project home (``home``, ``$LITE_AGENT_HOME`` or ``~/.lite-agent``); with
    ``sessions=False`` everything stays in memory and the session methods raise
    :class:`SessionsDisabledError`. ``tools`` defaults to the file tools, bash, glob and grep;
    ``system_prompt`` to a short coding-agent prompt. A ``send`` runs at most ``max_turns``
    model calls. At most ``max_live_sessions`` sessions keep an actor (a thread), running ones
    included; when all of them run a turn, further sends wait in FIFO order (at most
    ``max_queued_sends``; beyond that :class:`HostSaturatedError` is raised at once), and a
    session idle for ``idle_timeout_s`` seconds (``None``: never) is passivated; it comes back
    from its log. At most ``max_background_tasks`` background tasks (``bash`` with
    ``run_in_background``; each a thread) run at once, every session's together: one more is
    refused with an error result the model reads (``0``: none at all). At most
    ``max_operations`` compactions, restores and collections of the asyncio API (and
    ``iter_compact``'s compactions) run at once, each on a thread of its own; the others wait in
    order. :meth:`LiteAgent.host_stats` shows the load. ``compactor`` is what
    :meth:`LiteAgent.compact` runs (default: ``default_compactor(max_tokens=None)`` spilling
    into the checkpointer's blob store: asked to compact, it always drops the middle turns and
    clears old tool results, instead of waiting for a token trigger).
    ``tool_env`` (a :class:`~liteagent.tools.ToolEnv` from :func:`~liteagent.tools.tool_env`)
    sets what the model's shell commands see; by default the host environment less every
    credential-like variable (with ``tools=``, build the shell with ``bash_tool(env)``).
    ``context`` configures the ContextEngine (on by default; see :class:`ContextOptions`):
    ``ContextOptions(...)`` or a dict of its fields; ``False`` sends the raw folded
    conversation. The ``context`` tool (reading archived and spilled results) is added to the
    tools unless it is there already, whenever a marker naming it can be shown: with the
    engine on, or a ``compactor`` that spills (the default one does, unless ``tools`` holds a
    tool of its own named ``context``; see :attr:`~liteagent.context.Compactor.spills`). A
    tool of one's own named ``context`` beside the engine or a spilling ``compactor`` raises
    :class:`~liteagent.eventlog.errors.InvalidArgumentError`: the markers would name it.
    """
    return LiteAgent(
        _lite_core(
            model=model,
            model_name=model_name,
            workdir=workdir,
            checkpointer=checkpointer,
            sessions=sessions,
            tools=tools,
            system_prompt=system_prompt,
            context=context,
            home=home,
            max_turns=max_turns,
            max_tokens=max_tokens,
            max_live_sessions=max_live_sessions,
            compactor=compactor,
            max_queued_sends=max_queued_sends,
            idle_timeout_s=idle_timeout_s,
            tool_env=tool_env,
            max_background_tasks=max_background_tasks,
            max_operations=max_operations,
        )
    )


def create_async_lite_agent(
    *,
    model: ModelProvider,
    model_name: str,
    workdir: str | os.PathLike[str] = ".",
    checkpointer: Checkpointer | None = None,
    sessions: bool = True,
    tools: Sequence[Tool] | None = None,
    system_prompt: str | None = None,
    context: ContextArg = None,
    home: str | os.PathLike[str] | None = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    max_tokens: int = 8192,
    max_live_sessions: int = 256,
    compactor: Compactor | None = None,
    max_queued_sends: int = DEFAULT_MAX_QUEUED_SENDS,
    idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
    tool_env: ToolEnv | None = None,
    max_background_tasks: int = DEFAULT_MAX_BACKGROUND_TASKS,
    max_operations: int = MAX_OPERATIONS,
) -> AsyncLiteAgent:
    """Like :func:`create_lite_agent`, for asyncio: the methods are coroutines."""
    return AsyncLiteAgent(
        _lite_core(
            model=model,
            model_name=model_name,
            workdir=workdir,
            checkpointer=checkpointer,
            sessions=sessions,
            tools=tools,
            system_prompt=system_prompt,
            context=context,
            home=home,
            max_turns=max_turns,
            max_tokens=max_tokens,
            max_live_sessions=max_live_sessions,
            compactor=compactor,
            max_queued_sends=max_queued_sends,
            idle_timeout_s=idle_timeout_s,
            tool_env=tool_env,
            max_background_tasks=max_background_tasks,
            max_operations=max_operations,
        )
    )


def create_agent(
    *,
    model: ModelProvider,
    model_name: str,
    tools: Sequence[Tool],
    use: Sequence[Any] = (),
    checkpointer: Checkpointer | None = None,
    context: ContextArg = False,
    workdir: str | os.PathLike[str] = ".",
    system_prompt: str | None = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    compactor: Compactor | None = None,
) -> LiteAgent:
    """The lower-level kernel: exactly the given ``tools`` and model-call middleware ``use``
    (objects with ``before_model(request, state)`` and/or ``wrap_model_call(request, call)``),
    no default system prompt, and an in-memory log unless a ``checkpointer`` is given. The
    ContextEngine is off unless ``context`` asks for it (see :func:`create_lite_agent`).

    The one tool added is the ``context`` tool, and only when something given can show the
    model a marker naming it: the engine, a middleware with a true ``spills`` attribute
    (:func:`~liteagent.context.compaction` of a compactor that spills), or a ``compactor``
    that spills (:attr:`~liteagent.context.Compactor.spills`). Without any of those,
    :meth:`LiteAgent.compact`'s default compactor does not spill either: the large tool
    results it moves out are dropped (``tool_result_budget_pass(200_000, None)``), then it
    drops the middle turns and clears old tool results, as ``default_compactor(max_tokens=None)``
    does. A tool of one's own named ``context`` (not ``liteagent.tools.context``) beside any
    of those raises :class:`~liteagent.eventlog.errors.InvalidArgumentError`: the markers would send
    the model to it."""
    return LiteAgent(
        _core(
            model=model,
            model_name=model_name,
            workdir=workdir,
            checkpointer=checkpointer,
            sessions=True,
            tools=tools,
            system_prompt=system_prompt,
            home=None,
            max_turns=max_turns,
            max_tokens=8192,
            max_live_sessions=256,
            middleware=use,
            compactor=compactor,
            memory_default=True,
            spill_by_default=False,
            context=context,
        )
    )
