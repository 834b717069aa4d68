"""The constructors of the public API: create_lite_agent, create_async_lite_agent, create_agent."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from liteagent.context import Compactor, ContextOptions, blob_spill_store, default_compactor
from liteagent.eventlog import (
    Checkpointer,
    InvalidArgumentError,
    file_checkpointer,
    memory_checkpointer,
)
from liteagent.providers import ModelProvider
from liteagent.tools import Tool, default_tools
from liteagent.tools import context as context_tool

from ._agent import AsyncLiteAgent, LiteAgent
from ._core import AgentCore
from ._prompt import DEFAULT_SYSTEM_PROMPT

__all__ = ["create_agent", "create_async_lite_agent", "create_lite_agent"]

DEFAULT_MAX_TURNS = 50


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
    context: ContextOptions | None = None,
) -> AgentCore:
    if not isinstance(model, ModelProvider):
        raise InvalidArgumentError(f"model must be a ModelProvider, got {type(model).__name__}")
    if not isinstance(model_name, str) or not model_name:
        raise InvalidArgumentError("model_name must be a non-empty string")
    for name, value in (("max_turns", max_turns), ("max_tokens", max_tokens),
                        ("max_live_sessions", max_live_sessions)):
        if type(value) is not int or value < 1:
            raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")
    root = Path(workdir).expanduser().resolve()
    if not root.is_dir():
        raise InvalidArgumentError(f"workdir {str(root)!r} is not a folder")
    owns = checkpointer is None
    if checkpointer is None:
        checkpointer = (
            file_checkpointer(workdir=root, home=home)
            if sessions and not memory_default
            else memory_checkpointer()
        )
    elif not isinstance(checkpointer, Checkpointer):
        raise InvalidArgumentError(
            f"checkpointer must be a Checkpointer, got {type(checkpointer).__name__}"
        )
    try:
        return AgentCore(
            provider=model,
            model_name=model_name,
            workdir=root,
            checkpointer=checkpointer,
            owns_checkpointer=owns,
            sessions=sessions,
            tools=_with_context_tool(default_tools() if tools is None else tools, context),
            system_prompt=system_prompt,
            middleware=middleware,
            compactor=(default_compactor(max_tokens=None,
                                         store=blob_spill_store(checkpointer.blobs))
                       if compactor is None else compactor),
            context=context,
            max_turns=max_turns,
            max_tokens=max_tokens,
            max_live_sessions=max_live_sessions,
        )
    except BaseException:
        if owns:
            checkpointer.close()
        raise


ContextArg = ContextOptions | Mapping[str, Any] | bool | None
"""``context=``: :class:`ContextOptions`, a dict of its fields, ``True``/``None`` (the
defaults) or ``False`` (no engine: the model sees the raw folded conversation)."""


def context_options(context: ContextArg) -> ContextOptions | None:
    """The engine options ``context`` asks for (``None``: no engine)."""
    if context is None or context is True:
        return ContextOptions()
    if context is False:
        return None
    return ContextOptions.of(context)


def _with_context_tool(tools: Sequence[Tool], options: ContextOptions | None) -> list[Tool]:
    """``tools`` plus the ``context`` tool when the engine is on (archived results are read
    through it) and no tool of that name is there."""
    out = list(tools)
    if options is not None and all(t.name != context_tool.name for t in out):
        out.append(context_tool)
    return out


def _lite_core(
    *, context: ContextArg, system_prompt: str | None, **kwargs: Any
) -> AgentCore:
    """The core of a create_lite_agent / create_async_lite_agent agent: defaults filled in."""
    prompt = DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt
    return _core(system_prompt=prompt, middleware=(), context=context_options(context),
                 **kwargs)


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
) -> LiteAgent:
    """Create a coding agent on ``workdir``.

    ``model`` is a :class:`~liteagent.providers.ModelProvider` (e.g. ``anthropic()``) and
    ``model_name`` the model to call. ``checkpointer`` defaults to ``file_checkpointer()``
    under the project home (``home``, ``$LITE_AGENT_HOME`` or ``~/.lite-agent``); with
    ``sessions=False`` everything stays in memory and the session methods raise
    :class:`SessionsDisabledError`. ``tools`` defaults to the file tools, bash, glob and grep;
    ``system_prompt`` to a short coding-agent prompt. A ``send`` runs at most ``max_turns``
    model calls. At most ``max_live_sessions`` sessions keep an actor; idle ones are passivated
    and come back from their log. ``compactor`` is what :meth:`LiteAgent.compact` runs
    (default: ``default_compactor(max_tokens=None)`` spilling into the checkpointer's blob
    store: asked to compact, it always drops the middle turns and clears old tool results,
    instead of waiting for a token trigger).
    ``context`` configures the ContextEngine (on by default; see :class:`ContextOptions`):
    ``ContextOptions(...)`` or a dict of its fields; ``False`` sends the raw folded
    conversation. With the engine on, the ``context`` tool (reading archived results) is added
    to the tools unless one of that name is there.
    """
    return LiteAgent(_lite_core(
        model=model, model_name=model_name, workdir=workdir, checkpointer=checkpointer,
        sessions=sessions, tools=tools, system_prompt=system_prompt, context=context, home=home,
        max_turns=max_turns, max_tokens=max_tokens, max_live_sessions=max_live_sessions,
        compactor=compactor,
    ))


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
) -> AsyncLiteAgent:
    """Like :func:`create_lite_agent`, for asyncio: the methods are coroutines."""
    return AsyncLiteAgent(_lite_core(
        model=model, model_name=model_name, workdir=workdir, checkpointer=checkpointer,
        sessions=sessions, tools=tools, system_prompt=system_prompt, context=context, home=home,
        max_turns=max_turns, max_tokens=max_tokens, max_live_sessions=max_live_sessions,
        compactor=compactor,
    ))


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
    ContextEngine is off unless ``context`` asks for it (see :func:`create_lite_agent`)."""
    return LiteAgent(_core(
        model=model, model_name=model_name, workdir=workdir,
        checkpointer=checkpointer, sessions=True, tools=tools,
        system_prompt=system_prompt, home=None, max_turns=max_turns, max_tokens=8192,
        max_live_sessions=256, middleware=use, compactor=compactor, memory_default=True,
        context=context_options(context),
    ))
