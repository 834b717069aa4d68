"""The replay provider: answers from a recorded session, checking each request against the log.

``replay(events)`` takes a session log (``StoredEvent`` values as a checkpointer reads them, or
bare event bodies) and answers call *k* (0-based) with the *k*-th recorded
:class:`~liteagent.eventlog.types.AssistantMessage`, streamed exactly like
:func:`~liteagent.providers._scripted.scripted` does. Calls beyond the recorded responses raise
:class:`UnexpectedRequestError`; :meth:`ReplayProvider.assert_all_used` raises
:class:`UnusedResponsesError` while recorded responses remain. Cancellation, capability checks
and the :attr:`~ReplayProvider.requests` record behave as for the scripted provider.

**What a request must match** (``strict=True``). The *inputs* of a stretch of conversation are
the content blocks of its user side, in order, reduced to keys:

- a text block gives ``("text", text)``;
- a tool_result block gives ``("tool_result", tool_use_id, content, is_error)``, where an absent
  ``content`` counts as ``""`` and an absent ``is_error`` as ``False`` (the API's defaults);
- every other block (images, raw blocks) is ignored.

The *expected* inputs of call *k* are those of the ``UserPrompt`` and ``ToolResult`` events
logged after recorded assistant message *k - 1* (or from the start, for *k = 0*), and after
the last ``TurnAborted`` with a notice since (which the conversation shows as an assistant
message, so the inputs before it belong to the stopped turn), and before recorded assistant
message *k*. The *actual* inputs are those of the request's user-role
messages after its last assistant-role message (all of its messages if it has none). The call
matches when the two key sequences are equal; otherwise it raises :class:`ReplayMismatchError`
naming the call, the first differing position, and both sequences. Splitting or merging user
messages does not matter (blocks are compared, not messages); the order does. The rest of the
request (system prompt, tools, earlier turns, the model) is not compared, and a request that is
a compacted projection of the conversation is out of scope: it must still end with the same
inputs. ``strict=False`` skips the check and answers every call in order.

A call that raised :class:`ReplayMismatchError` has still used its recorded response.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from msgspec import UNSET

from liteagent.eventlog import StoredEvent
from liteagent.eventlog._interchange import message_from_dict
from liteagent.eventlog.types import (
    AssistantMessage,
    Block,
    Event,
    Message,
    OpaqueEvent,
    TextBlock,
    ToolResult,
    ToolResultBlock,
    TurnAborted,
    UserPrompt,
)

from ._contract import ModelRequest, ModelResponse
from ._errors import ReplayMismatchError
from ._scripted import ScriptProviderBase, items_of, summarize_block, summarize_blocks

__all__ = ["InputKey", "ReplayProvider", "replay", "replay_messages", "request_inputs"]

InputKey: TypeAlias = tuple[Any, ...]
"""The comparable key of one input block: ``("text", text)`` or
``("tool_result", tool_use_id, content, is_error)``."""


def _key(block: Block) -> InputKey | None:
    if type(block) is TextBlock:
        return ("text", block.text)
    if type(block) is ToolResultBlock:
        content = "" if block.content is UNSET else block.content
        return ("tool_result", block.tool_use_id, content, block.is_error is True)
    return None


def _keys(blocks: Iterable[Block]) -> list[InputKey]:
    return [k for k in map(_key, blocks) if k is not None]


def request_inputs(request: ModelRequest) -> list[InputKey]:
    """The input keys of ``request``: its user-side blocks after its last assistant message."""
    messages = request.messages
    start = 0
    for i, message in enumerate(messages):
        if message.role == "assistant":
            start = i + 1
    return _keys(b for m in messages[start:] if m.role == "user" for b in m.content)


class _Recorded:
    """One recorded response, the inputs expected before it, and where it is in the log."""

    __slots__ = ("expected", "message", "where")

    def __init__(self, message: AssistantMessage, expected: list[InputKey], where: str) -> None:
        self.message = message
        self.expected = expected
        self.where = where


def _describe_keys(keys: Sequence[InputKey]) -> str:
    parts = []
    for key in keys:
        if key[0] == "text":
            parts.append(summarize_block(TextBlock(key[1])))
        else:
            _, tool_use_id, content, is_error = key
            parts.append(summarize_block(ToolResultBlock(tool_use_id, content, is_error)))
    return "[" + ", ".join(parts) + "]"


class ReplayProvider(ScriptProviderBase):
    """See :func:`replay`."""

    def __init__(
        self,
        events: Iterable[StoredEvent | Event | OpaqueEvent],
        *,
        strict: bool = True,
        stream_chunk: int | None = None,
        name: str = "replay",
        capabilities: Iterable[str] = frozenset(),
    ) -> None:
        super().__init__(name=name, stream_chunk=stream_chunk, capabilities=capabilities)
        self.strict = strict
        self._recorded: list[_Recorded] = []
        pending: list[InputKey] = []
        for position, item in enumerate(items_of(events, "events"), start=1):
            if isinstance(item, StoredEvent):
                body, where = item.body, f"seq {item.seq}"
            else:
                body, where = item, f"event #{position}"
            if isinstance(body, UserPrompt):
                pending.extend(_keys(body.content))
            elif isinstance(body, ToolResult):
                pending.extend(_keys((body.block,)))
            elif isinstance(body, AssistantMessage):
                self._recorded.append(_Recorded(body, pending, where))
                pending = []
            elif isinstance(body, TurnAborted) and body.notice:
                pending = []  # the stopped turn's inputs: the request shows them before it

    def _size(self) -> int:
        return len(self._recorded)

    def _answer(self, index: int, request: ModelRequest) -> ModelResponse:
        recorded = self._recorded[index]
        if self.strict:
            actual = request_inputs(request)
            if actual != recorded.expected:
                first = next(
                    (
                        i
                        for i, (a, b) in enumerate(zip(actual, recorded.expected, strict=False))
                        if a != b
                    ),
                    min(len(actual), len(recorded.expected)),
                )
                raise ReplayMismatchError(
                    f"{self.name}: call {index + 1} (answered by the assistant message at "
                    f"{recorded.where}) differs from the recording at input {first + 1}: "
                    f"expected {_describe_keys(recorded.expected)}, "
                    f"got {_describe_keys(actual)}"
                )
        return ModelResponse(message=recorded.message)

    def _describe(self, index: int) -> str:
        recorded = self._recorded[index]
        return f"assistant at {recorded.where} {summarize_blocks(recorded.message.content)}"


def replay(
    events: Iterable[StoredEvent | Event | OpaqueEvent],
    *,
    strict: bool = True,
    stream_chunk: int | None = None,
    name: str = "replay",
    capabilities: Iterable[str] = frozenset(),
) -> ReplayProvider:
    """Return a provider answering call *k* with the *k*-th recorded assistant message of
    ``events`` (see the module docstring for what ``strict`` checks). ``stream_chunk``,
    ``name`` and ``capabilities`` are as for ``scripted``. The log is read once, here."""
    return ReplayProvider(
        events, strict=strict, stream_chunk=stream_chunk, name=name, capabilities=capabilities
    )


def replay_messages(
    messages: Iterable[Message | Mapping[str, Any]],
    *,
    strict: bool = True,
    stream_chunk: int | None = None,
    name: str = "replay",
    capabilities: Iterable[str] = frozenset(),
) -> ReplayProvider:
    """Return :func:`replay` over a transcript: :class:`Message` values or Anthropic-shaped
    message dicts (converted with ``message_from_dict``, whose errors propagate). Each user
    message counts as a prompt (its text and tool_result blocks are the inputs), each assistant
    message as a recorded response."""
    events: list[Event] = []
    for item in items_of(messages, "messages"):
        message = item if isinstance(item, Message) else message_from_dict(item)
        if message.role == "assistant":
            events.append(AssistantMessage(content=message.content))
        else:
            events.append(UserPrompt(content=message.content))
    return replay(
        events, strict=strict, stream_chunk=stream_chunk, name=name, capabilities=capabilities
    )
