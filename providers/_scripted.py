"""The scripted provider: answers calls from a fixed script, and fails loudly when used otherwise.

``scripted([...])`` answers call *k* with script item *k*, in call order across all threads. An
item is an :class:`~liteagent.eventlog.types.AssistantMessage` (or a whole
:class:`ModelResponse`), a function of the :class:`ModelRequest` returning one of those, or an
exception instance that the call raises instead of streaming (to script provider failures such as
:class:`ContextOverflowError`). A call after the script ran out raises
:class:`UnexpectedRequestError`; :meth:`ScriptedProvider.assert_all_used` raises
:class:`UnusedResponsesError` while items are left.

One :meth:`~ScriptedProvider.stream` call, in order:

1. raise :class:`~liteagent.eventlog.errors.OperationCancelledError` if ``cancel`` is already
   cancelled, and :class:`CapabilityNotSupportedError` if the request uses a context edit the
   provider does not declare. Such a call never reached the "model": it takes no item and is not
   recorded.
2. take the next item (atomically) and record the request in :attr:`~ScriptedProvider.requests`
   (also when no item is left, so a test can look at the unexpected request);
3. resolve the item: raise it if it is an exception, call it if it is a function (its exceptions
   propagate);
4. stream the message (see :func:`response_events`), checking ``cancel`` before every event; a
   cancelled stream raises OperationCancelledError and never yields its ResponseComplete.

Like a real provider's, the final message can be stored in the log: a scripted message holding a
value msgpack cannot store (an integer beyond 64 bits, a string with a surrogate code point) is
answered in its lossless form, as the Messages API shape converts it
(``message_from_dict(message_to_dict(...))``: such a tool input is kept as its JSON text in
``ToolUseBlock.input_json``). Its live deltas stream the exact input JSON.

Like every provider, the stream is a generator: nothing of the above happens before the first
``next()``. The same machinery serves :mod:`liteagent.providers._replay`.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import msgspec

from liteagent.eventlog import CancelToken
from liteagent.eventlog._interchange import message_from_dict, message_to_dict
from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError, InvalidMessageError
from liteagent.eventlog.types import (
    AssistantMessage,
    Block,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

from ._contract import (
    CLEAR_THINKING,
    CLEAR_TOOL_USES,
    COMPACT,
    TOKEN_COUNTING,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ResponseComplete,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStart,
)
from ._errors import ScriptError, UnexpectedRequestError, UnusedResponsesError

__all__ = ["ScriptItem", "ScriptedProvider", "items_of", "response_events", "scripted"]

ScriptItem: TypeAlias = (
    AssistantMessage
    | ModelResponse
    | Callable[[ModelRequest], AssistantMessage | ModelResponse]
    | Exception
)

"""One scripted answer: a message or response, a function of the request, or an error to raise."""

_KNOWN_CAPABILITIES = frozenset({TOKEN_COUNTING, CLEAR_TOOL_USES, CLEAR_THINKING, COMPACT})
_SUMMARY_CHARS = 60


def response_events(response: ModelResponse, *, chunk: int | None = None) -> Iterator[StreamEvent]:
    """Yield the live events of ``response``, then ``ResponseComplete(response)``.

    Per block of the message, at its index: a text block gives :class:`TextDelta` pieces of at
    most ``chunk`` characters (``None``: the whole text in one delta), a thinking block likewise
    :class:`ThinkingDelta`, a tool_use block a :class:`ToolUseStart` then :class:`ToolInputDelta`
    pieces of its input encoded as compact JSON (its ``input_json`` when set). An empty text or
    thinking gives no delta; other blocks (redacted thinking, compaction, raw) give no live
    event and appear only in the final message. The pieces of a block concatenate to exactly
    its text, thinking or input JSON.
    """
    for index, block in enumerate(response.message.content):
        if type(block) is TextBlock:
            yield from (TextDelta(index, piece) for piece in _pieces(block.text, chunk))
        elif type(block) is ThinkingBlock:
            yield from (ThinkingDelta(index, piece) for piece in _pieces(block.thinking, chunk))
        elif type(block) is ToolUseBlock:
            yield ToolUseStart(index, block.id, block.name)
            encoded = (
                block.input_json
                if isinstance(block.input_json, str)
                else msgspec.json.encode(block.input).decode()
            )
            yield from (ToolInputDelta(index, piece) for piece in _pieces(encoded, chunk))
    yield ResponseComplete(response)


def _pieces(text: str, chunk: int | None) -> list[str]:
    if not text:
        return []
    if chunk is None:
        return [text]
    return [text[i : i + chunk] for i in range(0, len(text), chunk)]


def _short(text: str) -> str:
    return repr(text if len(text) <= _SUMMARY_CHARS else text[:_SUMMARY_CHARS] + "…")


def summarize_block(block: Block) -> str:
    if type(block) is TextBlock:
        return f"text {_short(block.text)}"
    if type(block) is ToolUseBlock:
        return f"tool_use {block.name}({block.id})"
    if type(block) is ToolResultBlock:
        content = block.content if isinstance(block.content, str) else "<blocks>"
        error = " (error)" if block.is_error is True else ""
        return f"tool_result {block.tool_use_id}{error} {_short(content)}"
    if type(block) is ThinkingBlock:
        return f"thinking {_short(block.thinking)}"
    return str(type(block).__struct_config__.tag)


def summarize_blocks(content: Iterable[Block]) -> str:
    """A short, one-line description of content blocks, for error messages."""
    return "[" + ", ".join(summarize_block(b) for b in content) + "]"


def summarize_request(request: ModelRequest) -> str:
    """A one-line description of the last message of ``request``, for error messages."""
    if not request.messages:
        return "no messages"
    last: Message = request.messages[-1]
    blocks = summarize_blocks(last.content)
    return f"{len(request.messages)} messages, the last {last.role}: {blocks}"


def _check_chunk(stream_chunk: int | None) -> int | None:
    if stream_chunk is not None and (type(stream_chunk) is not int or stream_chunk < 1):
        raise InvalidArgumentError(
            f"stream_chunk must be None or an int >= 1, got {shown(stream_chunk)}"
        )
    return stream_chunk


def _check_capabilities(capabilities: Iterable[str]) -> frozenset[str]:
    caps = frozenset(capabilities)
    unknown = caps - _KNOWN_CAPABILITIES
    if unknown:
        raise InvalidArgumentError(
            f"unknown capabilities {sorted(unknown)}; known: {sorted(_KNOWN_CAPABILITIES)}"
        )
    return caps


class ScriptProviderBase(ModelProvider):
    """The shared core of the scripted and replay providers: a fixed sequence of answers taken
    in call order under a lock, the record of requests, capability declaration and streaming.

    Subclasses say how many answers there are (:meth:`_size`), produce answer *k* for a request
    (:meth:`_answer`, called outside the lock) and describe the unused ones.
    """

    def __init__(self, *, name: str, stream_chunk: int | None, capabilities: Iterable[str]) -> None:
        self._name = name
        self._chunk = _check_chunk(stream_chunk)
        self.capabilities = _check_capabilities(capabilities)
        self._lock = threading.Lock()
        self._requests: list[ModelRequest] = []
        self._calls = 0

    @property
    def name(self) -> str:
        """The name given at construction (used in error messages)."""
        return self._name

    @property
    def requests(self) -> list[ModelRequest]:
        """Every request that reached the script, in the order they took their answer (a copy).

        ``requests[k]`` got answer *k*; a request that found no answer left is recorded too, so
        after unexpected calls the list is longer than :attr:`calls`. Calls refused before
        taking an answer (cancelled, unsupported context edit) are not recorded.
        """
        with self._lock:
            return list(self._requests)

    @property
    def calls(self) -> int:
        """How many answers have been taken (including ones that raised)."""
        with self._lock:
            return self._calls

    @abc.abstractmethod
    def _size(self) -> int:
        """How many answers the script holds."""

    @abc.abstractmethod
    def _answer(self, index: int, request: ModelRequest) -> ModelResponse:
        """The response to call ``index`` (0-based) for ``request``, or raise."""

    @abc.abstractmethod
    def _describe(self, index: int) -> str:
        """A one-line description of answer ``index`` for error messages."""

    def stream(
        self, request: ModelRequest, *, cancel: CancelToken | None = None
    ) -> Iterator[StreamEvent]:
        """Answer ``request`` with the next scripted response (see the module docstring)."""
        if cancel is not None:
            cancel.raise_if_cancelled()
        self.check_request(request)
        with self._lock:
            self._requests.append(request)
            index, number = self._calls, len(self._requests)
            if index < self._size():
                self._calls += 1
        if index >= self._size():
            raise UnexpectedRequestError(
                f"{self._name}: unexpected call {number}: the script has {self._size()} "
                f"response(s) and all were used; the request has {summarize_request(request)}"
            )
        response = self._answer(index, request)
        for event in response_events(response, chunk=self._chunk):
            if cancel is not None:
                cancel.raise_if_cancelled()
            yield event

    def count_tokens(self, request: ModelRequest) -> int:
        """Estimate the request's input tokens as ``len(json(messages)) // 4`` when
        ``TOKEN_COUNTING`` is declared; otherwise raise :class:`CapabilityNotSupportedError`."""
        if TOKEN_COUNTING not in self.capabilities:
            return super().count_tokens(request)
        return len(msgspec.json.encode(request.messages)) // 4

    def assert_all_used(self) -> None:
        """Raise :class:`UnusedResponsesError` listing the answers no call has taken."""
        with self._lock:
            used = self._calls
        total = self._size()
        if used < total:
            unused = "; ".join(f"#{i + 1} {self._describe(i)}" for i in range(used, total))
            raise UnusedResponsesError(
                f"{self._name}: {total - used} of {total} response(s) never requested: {unused}"
            )


class ScriptedProvider(ScriptProviderBase):
    """See :func:`scripted`."""

    def __init__(
        self,
        responses: Sequence[ScriptItem],
        *,
        stream_chunk: int | None = None,
        name: str = "scripted",
        capabilities: Iterable[str] = frozenset(),
    ) -> None:
        super().__init__(name=name, stream_chunk=stream_chunk, capabilities=capabilities)
        self._items: tuple[ScriptItem, ...] = items_of(responses, "responses")  # once: an
        for i, item in enumerate(self._items):  # iterator gives its items only once
            _check_item(i, item)

    def _size(self) -> int:
        return len(self._items)

    def _answer(self, index: int, request: ModelRequest) -> ModelResponse:
        item = self._items[index]
        if isinstance(item, Exception):
            raise item
        result = item if isinstance(item, AssistantMessage | ModelResponse) else item(request)
        if isinstance(result, AssistantMessage):
            return ModelResponse(message=storable(result))
        if isinstance(result, ModelResponse):
            stored = storable(result.message)
            return (
                result
                if stored is result.message
                else msgspec.structs.replace(result, message=stored)
            )
        raise ScriptError(
            f"{self._name}: response #{index + 1} ({self._describe(index)}) returned "
            f"{type(result).__name__}, not an AssistantMessage or ModelResponse"
        )

    def _describe(self, index: int) -> str:
        item = self._items[index]
        if isinstance(item, AssistantMessage):
            return f"assistant {summarize_blocks(item.content)}"
        if isinstance(item, ModelResponse):
            return f"assistant {summarize_blocks(item.message.content)}"
        if isinstance(item, Exception):
            return f"raise {item!r}"
        return f"function {getattr(item, '__qualname__', repr(item))}"


def storable(message: AssistantMessage) -> AssistantMessage:
    """``message`` itself when the log can store it; else its content in the lossless form the
    Messages API shape converts it to (module docstring). A message that is not JSON data
    (a Python object in a tool input) is left as it is: storing it fails loudly later."""
    try:
        msgspec.msgpack.encode(message.content)
    except (TypeError, ValueError, OverflowError):  # an int beyond 64 bits, a lone surrogate
        pass
    else:
        return message
    try:
        content = message_from_dict(message_to_dict(Message("assistant", message.content))).content
    except InvalidMessageError:
        return message
    return msgspec.structs.replace(message, content=content)


def items_of(value: object, name: str) -> tuple[Any, ...]:
    """The items of ``value`` (a list, tuple or other iterable, read once) as a tuple;
    :class:`InvalidArgumentError` for what is no such iterable (a str or a mapping is not)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{name} must be a list, got {shown(value)}")
    return tuple(value)


def _check_item(index: int, item: object) -> None:
    if isinstance(item, type):
        raise InvalidArgumentError(
            f"script item #{index + 1} is the class {item.__name__}; script an instance "
            "(an exception to raise) or a function of the request"
        )
    if not isinstance(item, AssistantMessage | ModelResponse | Exception) and not callable(item):
        raise InvalidArgumentError(
            f"script item #{index + 1} is a {type(item).__name__}: expected an AssistantMessage, "
            "a ModelResponse, a function of the ModelRequest, or an exception instance"
        )


def scripted(
    responses: Sequence[ScriptItem],
    *,
    stream_chunk: int | None = None,
    name: str = "scripted",
    capabilities: Iterable[str] = frozenset(),
) -> ScriptedProvider:
    """Return a provider that answers call *k* with ``responses[k]`` (see the module docstring).

    ``stream_chunk`` is the size in characters of the streamed text, thinking and tool-input
    pieces (``None``: one piece per block). ``capabilities`` are the optional capabilities it
    declares; with ``TOKEN_COUNTING``, :meth:`~ScriptedProvider.count_tokens` estimates
    ``len(json(messages)) // 4``. Raises :class:`InvalidArgumentError` for an item that is not a
    message, response, function or exception instance, a bad ``stream_chunk`` or an unknown
    capability.
    """
    return ScriptedProvider(
        responses, stream_chunk=stream_chunk, name=name, capabilities=capabilities
    )
