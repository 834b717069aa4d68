"""Turning a message into the SSE event sequence of the streaming Messages API.

:func:`stream_events` emits exactly the sequence of ``docs/anthropic-api.md`` §2.2::

    message_start, ping,
    (content_block_start, content_block_delta*, content_block_stop) per block,
    message_delta (stop_reason, stop_sequence, usage[, context_management]), message_stop

Per block type:

- ``text``: ``text_delta`` pieces of ``text_chunk`` characters;
- ``thinking``: ``thinking_delta`` pieces, then one ``signature_delta``;
- ``tool_use`` / ``server_tool_use``: the block starts with ``input: {}``; then an empty
  ``input_json_delta`` (as the API sends) and the JSON of the input cut into arbitrary
  fragments: the sizes in ``fragments`` (the rest as one last piece), or else a split drawn
  from ``random.Random(seed)``;
- ``compaction``: the block starts with ``content: null``, then one ``compaction_delta``
  carrying ``content`` and ``encrypted_content``;
- anything else (``redacted_thinking``, server tool results...): sent whole in its
  ``content_block_start``.

An event is a ``(name, data)`` pair; :func:`encode_event` frames it (every frame has an
``event:`` line: the SDK silently drops frames without one).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from liteagent.eventlog.errors import InvalidArgumentError

__all__ = ["SSEEvent", "encode_event", "stream_events"]

SSEEvent = tuple[str, dict[str, Any]]
"""One server-sent event: its ``event:`` name and its ``data:`` JSON object."""

_TOOL_USE_TYPES = frozenset({"tool_use", "server_tool_use"})
_MAX_RANDOM_FRAGMENT = 7


def encode_event(name: str, data: Mapping[str, Any]) -> bytes:
    """One SSE frame: ``event: <name>``, ``data: <json>`` and the blank line that ends it."""
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def stream_events(
    message: Mapping[str, Any],
    *,
    text_chunk: int = 8,
    fragments: Sequence[int] | None = None,
    seed: int = 0,
) -> list[SSEEvent]:
    """The full event sequence that streams ``message`` (a dict as built by ``message()``).

    ``text_chunk`` is the size of each text and thinking delta; ``fragments`` and ``seed``
    choose how tool input JSON is cut (see the module docstring). Raises
    ``InvalidArgumentError`` for a ``text_chunk`` or fragment size below 1.
    """
    if text_chunk < 1:
        raise InvalidArgumentError(f"text_chunk must be at least 1, got {text_chunk}")
    if fragments is not None and any(size < 1 for size in fragments):
        raise InvalidArgumentError(f"fragment sizes must be at least 1, got {list(fragments)}")
    rng = random.Random(seed)  # noqa: S311 - a reproducible split for tests, not for security
    final_usage = dict(message.get("usage") or {})
    start_usage = {k: v for k, v in final_usage.items() if k != "iterations"}
    if "output_tokens" in start_usage:
        start_usage["output_tokens"] = min(1, int(start_usage["output_tokens"]))
    head = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    head.pop("context_management", None)
    events: list[SSEEvent] = [
        ("message_start", {"type": "message_start", "message": head}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(message.get("content") or []):
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": _start(block)},
            )
        )
        events.extend(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in _deltas(block, text_chunk, fragments, rng)
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta_event: dict[str, Any] = {
        "type": "message_delta",
        "delta": {
            "stop_reason": message.get("stop_reason"),
            "stop_sequence": message.get("stop_sequence"),
        },
        "usage": final_usage,
    }
    if message.get("context_management") is not None:
        delta_event["context_management"] = message["context_management"]
    events.append(("message_delta", delta_event))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _start(block: Mapping[str, Any]) -> dict[str, Any]:
    """The block as its ``content_block_start`` carries it (streamed fields emptied)."""
    kind = block.get("type")
    if kind == "text":
        return {**block, "text": ""}
    if kind == "thinking":
        return {**block, "thinking": "", "signature": ""}
    if kind in _TOOL_USE_TYPES:
        return {**block, "input": {}}
    if kind == "compaction":
        return {**block, "content": None, "encrypted_content": None}
    return dict(block)


def _deltas(
    block: Mapping[str, Any],
    text_chunk: int,
    fragments: Sequence[int] | None,
    rng: random.Random,
) -> Iterator[dict[str, Any]]:
    """The ``delta`` objects that fill in ``block`` after its start event."""
    kind = block.get("type")
    if kind == "text":
        for piece in _chunks(str(block.get("text", "")), text_chunk):
            yield {"type": "text_delta", "text": piece}
    elif kind == "thinking":
        for piece in _chunks(str(block.get("thinking", "")), text_chunk):
            yield {"type": "thinking_delta", "thinking": piece}
        yield {"type": "signature_delta", "signature": block.get("signature", "")}
    elif kind in _TOOL_USE_TYPES:
        yield {"type": "input_json_delta", "partial_json": ""}
        for piece in _split(json.dumps(block.get("input", {})), fragments, rng):
            yield {"type": "input_json_delta", "partial_json": piece}
    elif kind == "compaction":
        yield {
            "type": "compaction_delta",
            "content": block.get("content"),
            "encrypted_content": block.get("encrypted_content"),
        }


def _chunks(value: str, size: int) -> Iterator[str]:
    """``value`` in consecutive pieces of ``size`` characters (none for an empty string)."""
    for start in range(0, len(value), size):
        yield value[start : start + size]


def _split(value: str, fragments: Sequence[int] | None, rng: random.Random) -> Iterator[str]:
    """``value`` cut at the given sizes (the rest as one piece) or at random ones."""
    position = 0
    sizes = iter(fragments) if fragments is not None else None
    while position < len(value):
        if sizes is None:
            size = rng.randint(1, _MAX_RANDOM_FRAGMENT)
        else:
            size = next(sizes, len(value) - position)
        yield value[position : position + size]
        position += size
