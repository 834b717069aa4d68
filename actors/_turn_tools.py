"""Running one tool call for the turn loop, and keeping what a turn records storable.

A tool call never stops a turn: an unknown tool, an input the log could not pass on, a failing
``changed_paths``, a snapshot that could not be taken, a tool raising anything (any
``BaseException``) or returning something that is not a :class:`ToolOutput` of text — each
becomes an ``is_error`` output the model can read. Text recorded in the log has its surrogate
code points replaced (:func:`safe_text`); a model answer holding values msgpack cannot store is
recorded in its lossless form (:func:`storable_reply`).
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pykka

from liteagent.eventlog._eventcodec import is_utf8
from liteagent.eventlog._interchange import (
    canonical_json,
    message_from_dict,
    message_to_dict,
    unstorable,
)
from liteagent.eventlog.types import (
    AssistantMessage,
    Event,
    RawBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from liteagent.eventlog.types import Message as ConvMessage
from liteagent.tools import Tool, ToolContext, ToolOutput

from ._envelope import ask
from ._snapshots import PostHashes, PreImage, PreImages, snapshot_event

__all__ = [
    "answerable",
    "checked_output",
    "describe_error",
    "interrupted_results",
    "run_one",
    "safe_text",
    "storable_reply",
    "takes_cancel",
]

_SNAPSHOT_TIMEOUT = 120.0
_INT_MAX = 2**63 - 1


def run_one(
    tool: Tool | None,
    call: ToolUseBlock,
    ctx: ToolContext,
    *,
    snapshot_ref: pykka.ActorRef[Any] | None,
    workdir: Path,
    log: Any,
) -> tuple[ToolOutput, list[Event], bool]:
    """Run one call; whatever goes wrong (the tool, its input, the snapshots) becomes an
    ``is_error`` output the model can read. The flag says whether the call ran a tool that
    declares no paths and is not read-only (an untracked side effect)."""
    if tool is None:
        return ToolOutput(safe_text(f"unknown tool {call.name!r}"), is_error=True), [], False
    if isinstance(call.input_json, str):
        return (
            ToolOutput(
                "the tool did not run: its input holds a value liteagent cannot pass to a tool "
                "(an integer beyond 64 bits or a string with a surrogate code point); the "
                f"input as JSON: {call.input_json[:2000]}",
                is_error=True,
            ),
            [],
            False,
        )
    given = _own_copy(call.input)  # a tool that changes its input changes no view
    try:
        paths = [str(p) for p in tool.changed_paths(given, ctx)]
    except BaseException as e:  # noqa: BLE001 -- a bad input is the model's error to read
        return ToolOutput(safe_text(describe_error(e)), is_error=True), [], False
    pre: list[PreImage] = []
    if paths and snapshot_ref is not None:
        unnamed = next((p for p in paths if not is_utf8(p)), None)  # lone surrogates
        if unnamed is not None:
            return (
                ToolOutput(
                    safe_text(
                        f"the tool did not run: the file name {unnamed!r} is not UTF-8, and the "
                        "snapshot that lets a restore undo the change keeps names as text; "
                        "rename the file (e.g. with bash) first"
                    ),
                    is_error=True,
                ),
                [],
                False,
            )
        try:
            pre = ask(snapshot_ref, PreImages(tuple(paths)), timeout=_SNAPSHOT_TIMEOUT)
        except BaseException as e:  # noqa: BLE001 -- without a pre-image it must not run
            log.warning("tool.snapshot_failed", tool=call.name, error=repr(e))
            return (
                ToolOutput(
                    safe_text(
                        "the tool did not run: the files it changes could not be snapshotted "
                        f"first ({describe_error(e)})"
                    ),
                    is_error=True,
                ),
                [],
                False,
            )
    try:
        output = checked_output(tool.run(given, ctx))
    except BaseException as e:  # noqa: BLE001 -- a failing tool is a result, not a crash
        log.warning("tool.failed", tool=call.name, error=repr(e))
        output = ToolOutput(safe_text(f"the tool failed: {describe_error(e)}"), is_error=True)
    snaps: list[Event] = []
    if pre and snapshot_ref is not None:
        post: list[str | None]
        known = True
        try:
            post = ask(snapshot_ref, PostHashes(tuple(paths)), timeout=_SNAPSHOT_TIMEOUT)
        except BaseException as e:  # noqa: BLE001 -- unknown after-state: restore refuses
            log.warning("tool.post_hash_failed", tool=call.name, error=repr(e))
            post, known = [None] * len(pre), False
        for p, h in zip(pre, post, strict=True):
            if known and h == p.sha256:
                continue  # unchanged (a call that failed, an edit to the same text)
            event = snapshot_event(p, h, call.id, workdir)
            if safe_text(event.path) == event.path:
                snaps.append(event)
            else:  # a file name that is not valid UTF-8 cannot be stored in the log
                log.warning("tool.snapshot_not_recorded", path=repr(event.path))
    return output, snaps, not paths and not tool.read_only


_ATOMS = frozenset({str, int, float, bool, type(None)})


def _own_copy(value: dict[str, Any]) -> dict[str, Any]:
    """A copy of a tool's input that shares nothing mutable with it: a flat one is copied
    shallowly (the common case; ``deepcopy`` costs ten times as much)."""
    if type(value) is dict and all(type(v) in _ATOMS for v in value.values()):
        return dict(value)
    return copy.deepcopy(value)


def describe_error(error: BaseException) -> str:
    """``"<type>: <message>"`` for ``error`` (its message even when ``str()`` fails)."""
    try:
        message = str(error)
    except Exception:  # noqa: BLE001 -- a broken __str__ must not hide the error
        message = "<unprintable>"
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def safe_text(text: str) -> str:
    """``text`` as the log can store it: surrogate code points (pairs joined, lone ones as
    U+FFFD) replaced; the same object when there are none."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def storable_reply(message: AssistantMessage) -> AssistantMessage:
    """``message`` in the form the log can store: blocks holding values msgpack cannot store
    kept as their exact JSON text (``message_from_dict`` of the API shape), usage numbers
    bounded, text fields without surrogate code points. Raises
    :class:`~liteagent.eventlog.errors.InvalidMessageError` for content that is not JSON data."""
    content = message_from_dict(
        message_to_dict(ConvMessage("assistant", message.content)), where="the model's answer"
    ).content
    u = message.usage
    usage = Usage(
        **{
            f: max(0, min(int(getattr(u, f)), _INT_MAX))
            for f in (
                "input_tokens",
                "output_tokens",
                "cache_creation_input_tokens",
                "cache_read_input_tokens",
            )
        }
    )
    stop = message.stop_reason
    model = message.model
    return AssistantMessage(
        content=content,
        usage=usage,
        stop_reason=safe_text(stop) if isinstance(stop, str) else None,
        model=safe_text(model) if isinstance(model, str) else None,
    )


_TOOL_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")  # what the Messages API accepts as a tool_use id


def answerable(message: AssistantMessage, seen: set[str], at: int = 0) -> AssistantMessage:
    """``message`` with each tool call one the next request can carry and the turn can
    answer: an id the API accepts (letters, digits, ``_`` and ``-``) and no other call of the
    conversation has (``seen``: the ids so far; the ids of ``message`` are added), else a new
    one; a name without surrogate code points; and a call the log could only keep as a raw
    block (a value it cannot store in its id, its name or a field beside its input) as a plain
    call without those fields. A model (or a proxy in front of one) that repeats ids, or sends
    one the API refuses, would otherwise make every later request of the session fail. A new
    id is a function of the old one, its place in ``message`` and ``at`` (the log's head), so
    the same log always gets the same ids."""
    content: list[Any] = []
    changed = False
    for index, block in enumerate(message.content):
        call = _raw_call(block) if type(block) is RawBlock else block
        if type(call) is ToolUseBlock:
            name = safe_text(call.name)
            ident = call.id
            if not _TOOL_ID.fullmatch(ident) or ident in seen:
                ident = _fresh_id(seen, f"{at}:{index}:{ident}")
            if (ident, name) != (call.id, call.name):
                call = msgspec.structs.replace(call, id=ident, name=name)
            seen.add(ident)
        changed = changed or call is not block
        content.append(call)
    if not changed:
        return message
    return msgspec.structs.replace(message, content=tuple(content))


def _raw_call(block: RawBlock) -> Any:
    """A tool call kept as a raw block (see :func:`answerable`) as a call that does not run;
    any other raw block as it is."""
    if block.data.get("type") != "tool_use" or not isinstance(block.json, str):
        return block
    try:
        whole = json.loads(block.json)
    except ValueError:
        return block
    if not isinstance(whole, dict):
        return block
    ident, name, given = whole.get("id"), whole.get("name"), whole.get("input")
    if not isinstance(given, dict):
        return block
    call = ToolUseBlock(
        ident if isinstance(ident, str) else "", name if isinstance(name, str) else "", {}
    )
    if unstorable(given) is None:  # the id, the name or another field was what the log refused
        return msgspec.structs.replace(call, input=given)
    return msgspec.structs.replace(
        call, input_json=canonical_json(given, where="the model's tool call")
    )


def _fresh_id(seen: set[str], basis: str) -> str:
    n = 0
    while True:
        digest = hashlib.sha256(f"{basis}:{n}".encode("utf-8", "surrogatepass")).hexdigest()
        ident = f"toolu_liteagent_{digest[:24]}"
        if ident not in seen:
            return ident
        n += 1


def checked_output(output: object) -> ToolOutput:
    """A tool's return value as an output the log can store (an error output when it is not
    a ToolOutput holding text)."""
    if type(output) is not ToolOutput:
        if isinstance(output, ToolOutput):
            output = ToolOutput(output.content, output.is_error)
        else:
            return ToolOutput(
                f"the tool returned a {type(output).__name__}, not a ToolOutput", is_error=True
            )
    given: object = output.content  # typed str, but a tool may build it with anything
    if not isinstance(given, str):
        return ToolOutput(
            f"the tool returned a {type(given).__name__} as its content, not text", is_error=True
        )
    content = safe_text(str.__str__(given))  # a plain str: the log encodes no subclass
    is_error = output.is_error is True
    if content is output.content and is_error is output.is_error:
        return output
    return ToolOutput(content, is_error=is_error)


def takes_cancel(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes a ``cancel`` keyword (a parameter of that name, or ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature to inspect: do not pass it
        return False
    return any(
        (p.name == "cancel" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        or p.kind is p.VAR_KEYWORD
        for p in params
    )


def interrupted_results(calls: Sequence[ToolUseBlock], reason: str) -> list[Event]:
    return [
        ToolResult(
            block=ToolResultBlock(c.id, f"interrupted: {reason}", is_error=True),
            tool_name=c.name or None,
            untracked=False,
        )
        for c in calls
    ]
