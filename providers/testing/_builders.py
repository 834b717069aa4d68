"""Builders for the JSON the Messages API returns: content blocks, usage, messages, error bodies.

Each builder is a plain function returning a fresh ``dict`` in the exact wire shape of the API
(``docs/anthropic-api.md`` §2.1), so a test can compare what the SDK parsed with what it
scripted::

    from liteagent.providers.testing import message, text, thinking, tool_use, usage

    reply = message(
        [thinking("Let me look", "sig-1"), text("Listing."), tool_use("toolu_1", "ls", {})],
        usage=usage(input_tokens=120, output_tokens=30, cache_read_input_tokens=100),
    )

A message dict is what :meth:`FakeMessagesServer.add` accepts; the server sends it as JSON or as
an SSE stream, whichever the request asked for.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError

__all__ = [
    "DEFAULT_MODEL",
    "compaction",
    "error_body",
    "iteration",
    "message",
    "redacted_thinking",
    "text",
    "thinking",
    "tool_use",
    "usage",
]

DEFAULT_MODEL = "claude-fake"
"""The model name :func:`message` reports when none is given (the SDK accepts any string)."""

_TOOL_USE_TYPES = frozenset({"tool_use", "server_tool_use"})
_message_ids = itertools.count(1)


def text(text: str) -> dict[str, Any]:
    """A ``text`` content block."""
    return {"type": "text", "text": text}


def tool_use(id: str, name: str, input: Mapping[str, Any]) -> dict[str, Any]:
    """A ``tool_use`` content block; ``input`` is any JSON object (nesting is kept exactly)."""
    return {"type": "tool_use", "id": id, "name": name, "input": dict(input)}


def thinking(thinking: str, signature: str = "fake-signature") -> dict[str, Any]:
    """A ``thinking`` content block with its ``signature`` (streamed as a ``signature_delta``)."""
    return {"type": "thinking", "thinking": thinking, "signature": signature}


def redacted_thinking(data: str) -> dict[str, Any]:
    """A ``redacted_thinking`` content block (streamed whole in its ``content_block_start``)."""
    return {"type": "redacted_thinking", "data": data}


def compaction(
    content: str | None,
    *,
    encrypted_content: str | None = None,
    signature: str | None = None,
    tool_changes: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A beta ``compaction`` block (server-side compaction, notes §4.2).

    ``content`` is the summary, or ``None`` for a failed compaction. Optional fields are only
    present when given, as the API omits them. Read it back with ``client.beta.messages``: the
    non-beta types have no compaction block.
    """
    block: dict[str, Any] = {"type": "compaction", "content": content}
    if encrypted_content is not None:
        block["encrypted_content"] = encrypted_content
    if signature is not None:
        block["signature"] = signature
    if tool_changes is not None:
        block["tool_changes"] = [dict(change) for change in tool_changes]
    return block


def usage(
    input_tokens: int = 10,
    output_tokens: int = 5,
    *,
    cache_creation_input_tokens: int = 0,
    cache_read_input_tokens: int = 0,
    **extra: Any,
) -> dict[str, Any]:
    """A ``usage`` object; ``extra`` adds fields verbatim (``iterations``, ``service_tier``...).

    In a stream, ``message_start`` carries every field but ``iterations`` (with
    ``output_tokens`` of at most 1, as the API does) and ``message_delta`` carries them all, so
    the SDK's accumulated message reports exactly these numbers.
    """
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": cache_creation_input_tokens,
        "cache_read_input_tokens": cache_read_input_tokens,
        **extra,
    }


def iteration(
    kind: str,
    input_tokens: int,
    output_tokens: int,
    *,
    cache_creation_input_tokens: int = 0,
    cache_read_input_tokens: int = 0,
    **extra: Any,
) -> dict[str, Any]:
    """One entry of the beta ``usage.iterations`` list; ``kind`` is ``"compaction"``,
    ``"message"``... (the SDK requires all four token counts, so they are always present).

    Pass a list of them as ``usage(..., iterations=[...])``.
    """
    return {
        "type": kind,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": cache_creation_input_tokens,
        "cache_read_input_tokens": cache_read_input_tokens,
        **extra,
    }


_default_usage = usage  # `message` takes a parameter named `usage`


def message(
    content: str | Sequence[Mapping[str, Any]] = (),
    *,
    stop_reason: str | None = None,
    stop_sequence: str | None = None,
    usage: Mapping[str, Any] | None = None,
    model: str = DEFAULT_MODEL,
    id: str | None = None,
    context_management: Mapping[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A complete assistant ``message`` as the non-streaming API returns it.

    - ``content``: a list of blocks, or a string for a single text block.
    - ``stop_reason``: defaults to ``"tool_use"`` when a tool_use block is present, else
      ``"end_turn"``; any string is sent as given.
    - ``usage``: defaults to :func:`usage` ``()``.
    - ``id``: defaults to a fresh ``msg_fake_<n>``.
    - ``context_management``: e.g. ``{"applied_edits": [...]}``; sent at the top level of a JSON
      reply and in the ``message_delta`` event of a stream.
    - ``fields``: other top-level fields, sent verbatim (``container``, ``stop_details``...).
    """
    if isinstance(content, str):
        blocks = [text(content)]
    elif isinstance(content, Sequence) and all(isinstance(b, Mapping) for b in content):
        blocks = [dict(b) for b in content if isinstance(b, Mapping)]
    else:
        raise InvalidArgumentError(
            f"content must be a str or a list of block dicts, got {shown(content)}"
        )
    if stop_reason is None:
        has_tool = any(b.get("type") in _TOOL_USE_TYPES for b in blocks)
        stop_reason = "tool_use" if has_tool else "end_turn"
    body: dict[str, Any] = {
        "id": id if id is not None else f"msg_fake_{next(_message_ids)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": dict(usage) if usage is not None else _default_usage(),
    }
    if context_management is not None:
        body["context_management"] = dict(context_management)
    body.update(fields)
    return body


def error_body(error_type: str, message: str, **fields: Any) -> dict[str, Any]:
    """The API's error body: ``{"type": "error", "error": {"type": ..., "message": ...}}``.

    ``fields`` are added inside ``error`` (for example ``details={"error_code": ...}``).
    """
    return {"type": "error", "error": {"type": error_type, "message": message, **fields}}
