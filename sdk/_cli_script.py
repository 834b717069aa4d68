"""``--provider scripted:FILE``: a scripted model read from a JSON file.

The file holds a list of responses (or ``{"responses": [...]}``), one per model call, in call
order. Each response is an object with one of:

- ``"text": "..."`` — a final answer (``stop_reason`` ``end_turn``);
- ``"tool": NAME, "input": {...}`` — one tool call (``stop_reason`` ``tool_use``), optionally
  with a ``"text"`` said before it; ``"tools": [{"name": ..., "input": ...}, ...]`` for several;
- ``"content": [...]`` — content blocks in the Anthropic Messages shape, with an optional
  ``"stop_reason"``;
- ``"error": "overloaded" | "rate_limit" | "overflow" | "unavailable" | "auth"`` — the call
  fails with that provider error (``"message"`` optional).

Any response may also carry ``"delay": SECONDS``: the call waits that long before answering (a
slow model; cancelling the turn interrupts the wait). Tool call ids are generated when absent.
A call after the last response fails with ``UnexpectedRequestError``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from liteagent.eventlog import CancelToken
from liteagent.eventlog._interchange import message_from_dict
from liteagent.eventlog.errors import InvalidArgumentError, OperationCancelledError
from liteagent.eventlog.types import AssistantMessage, Block, TextBlock, ToolUseBlock
from liteagent.providers import (
    ContextOverflowError,
    ModelProvider,
    OverloadedError,
    ProviderAuthError,
    ProviderUnavailableError,
    RateLimitError,
    ScriptItem,
    UnexpectedRequestError,
)
from liteagent.providers._contract import ModelRequest, ModelResponse, StreamEvent
from liteagent.providers._scripted import response_events

from ._cli_json import strict_loads

__all__ = [
    "MAX_SCRIPT_BYTES",
    "SCRIPT_FORMAT",
    "ScriptFileProvider",
    "load_script",
    "script_provider",
]

SCRIPT_FORMAT = """\
scripted:FILE is a JSON list of responses, one per model call, in order:
  {"text": "Done."}                                       a final answer
  {"tool": "write_file", "input": {"path": "a.py", "content": "x = 1\\n"}}
                                                          one tool call ("text" may precede it)
  {"tools": [{"name": "bash", "input": {"command": "ls"}}, ...]}   several calls
  {"content": [<Anthropic content blocks>], "stop_reason": "end_turn"}
  {"error": "overloaded"|"rate_limit"|"overflow"|"unavailable"|"auth", "message": "..."}
Any response may add "delay": SECONDS (a slow model; Ctrl-C interrupts it)."""

_ERRORS: dict[str, type[Exception]] = {
    "overloaded": OverloadedError,
    "rate_limit": RateLimitError,
    "overflow": ContextOverflowError,
    "unavailable": ProviderUnavailableError,
    "auth": ProviderAuthError,
}


def _tool_calls(item: dict[str, Any], number: int, where: str) -> list[Block]:
    calls = item.get("tools")
    if calls is None:
        calls = [{"name": item["tool"], "input": item.get("input", {})}]
    if not isinstance(calls, list) or not calls:
        raise InvalidArgumentError(f'{where}: "tools" must be a non-empty list')
    blocks: list[Block] = []
    for i, call in enumerate(calls, start=1):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise InvalidArgumentError(f'{where}: tool call {i} needs a "name"')
        tool_input = call.get("input", {})
        if not isinstance(tool_input, dict):
            raise InvalidArgumentError(f"{where}: the input of tool call {i} must be an object")
        call_id = call.get("id") or f"toolu_{number:03d}_{i}"
        blocks.append(ToolUseBlock(str(call_id), call["name"], tool_input))
    return blocks


def _item(item: Any, number: int) -> tuple[ScriptItem, float]:
    """One response of the file as a script item, and its delay."""
    where = f"response {number}"
    if not isinstance(item, dict):
        raise InvalidArgumentError(f"{where}: expected an object, got {type(item).__name__}")
    delay = item.get("delay", 0)
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay <= 86400:
        raise InvalidArgumentError(
            f'{where}: "delay" must be a number of seconds, 0 to 86400 (a day)'
        )
    if "error" in item:
        kind = item["error"]
        if kind not in _ERRORS:
            raise InvalidArgumentError(
                f"{where}: unknown error {kind!r}; one of {', '.join(sorted(_ERRORS))}"
            )
        return _ERRORS[kind](str(item.get("message", f"scripted {kind} error"))), float(delay)
    if "content" in item:
        message = message_from_dict({"role": "assistant", "content": item["content"]}, where=where)
        uses_tools = any(type(b) is ToolUseBlock for b in message.content)
        stop = item.get("stop_reason", "tool_use" if uses_tools else "end_turn")
        if stop is not None and not isinstance(stop, str):
            raise InvalidArgumentError(f'{where}: "stop_reason" must be a string or null')
        return AssistantMessage(content=message.content, stop_reason=stop), float(delay)
    if "tool" in item or "tools" in item:
        blocks: list[Block] = []
        if isinstance(item.get("text"), str):
            blocks.append(TextBlock(item["text"]))
        blocks.extend(_tool_calls(item, number, where))
        return AssistantMessage(content=tuple(blocks), stop_reason="tool_use"), float(delay)
    if isinstance(item.get("text"), str):
        return AssistantMessage(content=(TextBlock(item["text"]),), stop_reason="end_turn"), float(
            delay
        )
    raise InvalidArgumentError(
        f'{where}: needs one of "text", "tool", "tools", "content" or "error"'
    )


MAX_SCRIPT_BYTES = 64 * 1024 * 1024
"""The largest script file read (a larger one, or an endless one such as ``/dev/zero``, is
refused rather than read until the memory runs out)."""


def _read_limited(path: str | Path) -> str:
    with Path(path).open("rb") as f:
        data = f.read(MAX_SCRIPT_BYTES + 1)
    if len(data) > MAX_SCRIPT_BYTES:
        raise InvalidArgumentError(
            f"the script {str(path)!r} is larger than {MAX_SCRIPT_BYTES // (1024 * 1024)} MiB, "
            "the most a script may be"
        )
    return data.decode("utf-8")


def load_script(path: str | Path) -> tuple[list[ScriptItem], list[float]]:
    """Read a script file (see the module docstring): its items and their delays."""
    try:
        data = strict_loads(_read_limited(path))
    except OSError as e:
        raise InvalidArgumentError(f"cannot read the script {str(path)!r}: {e.strerror}") from e
    except RecursionError as e:
        raise InvalidArgumentError(f"the script {str(path)!r} is nested too deeply") from e
    except InvalidArgumentError:  # too large
        raise
    except UnicodeDecodeError as e:
        raise InvalidArgumentError(
            f"the script {str(path)!r} is not UTF-8 text: byte {e.start + 1} "
            f"(0x{e.object[e.start]:02x}) is not part of a UTF-8 character"
        ) from e
    except ValueError as e:
        raise InvalidArgumentError(f"the script {str(path)!r} is not valid JSON: {e}") from e
    if isinstance(data, dict):
        data = data.get("responses")
    if not isinstance(data, list):
        raise InvalidArgumentError(
            f'the script {str(path)!r} must be a JSON list of responses (or {{"responses": [...]}})'
        )
    items: list[ScriptItem] = []
    delays: list[float] = []
    for number, raw in enumerate(data, start=1):
        item, delay = _item(raw, number)
        items.append(item)
        delays.append(delay)
    return items, delays


class ScriptFileProvider(ModelProvider):
    """Answers call *k* with response *k* of a script file, after its delay (see the module
    docstring). A call takes its response when it starts, so a call cancelled during its delay
    has used it: the next call gets the next response."""

    def __init__(
        self,
        items: list[ScriptItem],
        delays: list[float],
        *,
        name: str,
        stream_chunk: int | None = 16,
    ) -> None:
        self._items = items
        self._delays = delays
        self._name = name
        self._chunk = stream_chunk
        self._lock = threading.Lock()
        self._calls = 0
        self.requests: list[ModelRequest] = []  # every call's request, in call order

    @property
    def name(self) -> str:
        """``scripted:FILE``."""
        return self._name

    def stream(
        self, request: ModelRequest, *, cancel: CancelToken | None = None
    ) -> Iterator[StreamEvent]:
        """Wait the response's delay (cancellable), then stream it or raise its error."""
        token = cancel or CancelToken()
        token.raise_if_cancelled()
        with self._lock:
            index = self._calls
            self._calls += 1
            self.requests.append(request)
        if index >= len(self._items):
            raise UnexpectedRequestError(
                f"{self._name}: unexpected call {index + 1}: the script has "
                f"{len(self._items)} responses and all were used"
            )
        if self._delays[index] and token.wait(self._delays[index]):
            raise OperationCancelledError(token.reason or "cancelled")
        item = self._items[index]
        if isinstance(item, Exception):
            raise item
        assert isinstance(item, AssistantMessage)  # what load_script makes
        for event in response_events(ModelResponse(message=item), chunk=self._chunk):
            token.raise_if_cancelled()
            yield event


def script_provider(path: str | Path, *, stream_chunk: int | None = 16) -> ScriptFileProvider:
    """A provider answering from the script file at ``path``."""
    items, delays = load_script(path)
    return ScriptFileProvider(items, delays, name=f"scripted:{path}", stream_chunk=stream_chunk)
