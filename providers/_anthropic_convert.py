"""Conversion between liteagent's provider-neutral types and the Anthropic Messages API.

Outbound, a :class:`ModelRequest` becomes the keyword arguments of ``messages.stream`` /
``beta.messages.stream``: messages in the API's JSON shape (via
:func:`liteagent.eventlog.messages_to_dicts`, so every block, signature, compaction block and
unknown key goes out verbatim, and a value kept as JSON text goes out as the exact value), tool
schemas, the system prompt, extended thinking, native context edits, and prompt-cache
breakpoints on the stable prefix. What the API would refuse is left out of the messages: text
blocks without non-whitespace text (a model may answer with one), thinking blocks without a
signature, and a message left empty by that (its neighbours, then of one role, are merged).
Values JSON on the wire cannot carry, which only a tool input or a block kept as JSON text can
hold, go out replaced: a surrogate code point as U+FFFD, a non-finite number as ``null`` (the
log keeps them exactly; the SDK's encoder would fail the whole request otherwise).
Inbound, a response message becomes an :class:`~liteagent.eventlog.types.AssistantMessage` with
usage and stop reason, in a form the log can store (values msgpack cannot hold are kept as their
exact JSON text; usage numbers are bounded to 63 bits; a surrogate code point in the stop reason
or model name is replaced), and the edits the API reports applying become :class:`AppliedEdit`
values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from msgspec import UNSET

from liteagent.eventlog import messages_to_dicts
from liteagent.eventlog._interchange import message_from_dict
from liteagent.eventlog.types import (
    AssistantMessage,
    Block,
    Message,
    RawBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

from ._contract import (
    AppliedEdit,
    ClearThinking,
    ClearToolUses,
    Compact,
    ContextEdit,
    ModelRequest,
    ToolSchema,
)

__all__ = [
    "COMPACT_BETA",
    "CONTEXT_MANAGEMENT_BETA",
    "applied_edits",
    "assistant_message",
    "count_tokens_params",
    "request_params",
]

CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
COMPACT_BETA = "compact-2026-01-12"
_EPHEMERAL = {"type": "ephemeral"}
_MAX_BREAKPOINTS = 4  # the API accepts at most four cache_control markers per request
_INT_MAX = 2**63 - 1
# Block types that may carry cache_control (thinking blocks may not).
_CACHEABLE = frozenset({"text", "tool_use", "tool_result", "image", "document"})


def _refused(block: Block) -> bool:
    """Whether the API refuses ``block`` in a request: a thinking block without a signature
    (e.g. from an imported transcript whose signatures were redacted: the API cannot verify
    it), or a text block without non-whitespace text."""
    if type(block) is ThinkingBlock:
        return block.signature is UNSET
    return type(block) is TextBlock and not block.text.strip()


def _sendable(block: Block) -> Block:
    """``block``, with the refused text blocks of a tool result's content left out."""
    if (
        type(block) is ToolResultBlock
        and isinstance(block.content, tuple)
        and any(_refused(b) for b in block.content)
    ):
        return msgspec.structs.replace(
            block, content=tuple(b for b in block.content if not _refused(b))
        )
    return block


def _messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The API shape of ``messages``, without what the API refuses (module docstring)."""
    out: list[Message] = []
    left_out = False
    for message in messages:
        m = message
        if not m.content:  # a model may answer with no content at all
            left_out = True
            continue
        if any(_refused(b) or type(b) is ToolResultBlock for b in m.content):
            kept = tuple(_sendable(b) for b in m.content if not _refused(b))
            if not kept:
                left_out = True
                continue
            m = Message(m.role, kept, extra=m.extra, extra_json=m.extra_json)
        if left_out and out and out[-1].role == m.role:  # the message between them went
            last = out[-1]
            out[-1] = Message(
                m.role, last.content + m.content, extra=last.extra, extra_json=last.extra_json
            )
        else:
            out.append(m)
        left_out = False
    dicts = messages_to_dicts(out)
    for m, d in zip(out, dicts, strict=True):
        for block, b in zip(m.content, d["content"], strict=True):
            if type(block) is ToolUseBlock:
                b["input"] = _wire_value(b["input"])
            elif type(block) is RawBlock and isinstance(block.json, str):
                b.update(_wire_value(b))
    return dicts


def _wire_value(value: Any) -> Any:
    """``value`` as JSON on the wire can carry it (module docstring); the same object when it
    can already."""
    t = type(value)
    if t is str:
        if value.isascii():
            return value
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return value
    if t is float:
        return value if math.isfinite(value) else None
    if t is dict:
        return {_wire_value(k): _wire_value(v) for k, v in value.items()}
    if t is list:
        return [_wire_value(v) for v in value]
    return value


def _tool(tool: ToolSchema) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name, "input_schema": tool.input_schema}
    if tool.description:
        out["description"] = tool.description
    return out


def _edit(edit: ContextEdit) -> dict[str, Any]:
    if isinstance(edit, ClearToolUses):
        out: dict[str, Any] = {"type": "clear_tool_uses_20250919"}
        if edit.trigger_tokens is not None:
            out["trigger"] = {"type": "input_tokens", "value": edit.trigger_tokens}
        if edit.keep_tool_uses is not None:
            out["keep"] = {"type": "tool_uses", "value": edit.keep_tool_uses}
        if edit.clear_at_least_tokens is not None:
            out["clear_at_least"] = {"type": "input_tokens", "value": edit.clear_at_least_tokens}
        if edit.exclude_tools:
            out["exclude_tools"] = list(edit.exclude_tools)
        out["clear_tool_inputs"] = edit.clear_tool_inputs
        return out
    if isinstance(edit, ClearThinking):
        keep: Any = (
            {"type": "all"}
            if edit.keep_turns == "all"
            else {"type": "thinking_turns", "value": edit.keep_turns}
        )
        return {"type": "clear_thinking_20251015", "keep": keep}
    out = {"type": "compact_20260112", "pause_after_compaction": edit.pause_after_compaction}
    if edit.trigger_tokens is not None:
        out["trigger"] = {"type": "input_tokens", "value": edit.trigger_tokens}
    if edit.instructions is not None:
        out["instructions"] = edit.instructions
    return out


def _context_management(edits: Sequence[ContextEdit]) -> tuple[dict[str, Any], list[str]]:
    """The ``context_management`` parameter (clear_thinking first, as the API requires when it is
    combined with other edits) and the betas it needs."""
    ordered = sorted(edits, key=lambda e: 0 if isinstance(e, ClearThinking) else 1)
    betas = [CONTEXT_MANAGEMENT_BETA]
    if any(isinstance(e, Compact) for e in edits):
        betas.append(COMPACT_BETA)
    return {"edits": [_edit(e) for e in ordered]}, betas


def _mark(block: dict[str, Any]) -> bool:
    """Put a cache breakpoint on ``block`` if its type allows one; return whether it did."""
    if block.get("type") not in _CACHEABLE:
        return False
    block.setdefault("cache_control", dict(_EPHEMERAL))
    return True


def _mark_last(message: dict[str, Any]) -> bool:
    """Mark the last block of ``message`` that may carry a breakpoint."""
    return any(_mark(block) for block in reversed(message["content"]))


def _add_cache_breakpoints(
    system: list[dict[str, Any]] | None,
    tools: list[dict[str, Any]],
    messages: list[dict[str, Any]],
) -> None:
    """Mark the stable prefix for prompt caching: the end of the system prompt (or of the
    tools, without one), the newest message, and the last user message before it, so the next
    request reads everything up to there from the cache."""
    used = sum(1 for m in messages for b in m["content"] if "cache_control" in b)
    if system:
        system[-1].setdefault("cache_control", dict(_EPHEMERAL))
        used += 1
    elif tools:
        tools[-1].setdefault("cache_control", dict(_EPHEMERAL))
        used += 1
    if messages and used < _MAX_BREAKPOINTS and _mark_last(messages[-1]):
        used += 1
    for m in reversed(messages[:-1]):
        if used >= _MAX_BREAKPOINTS:
            break
        if m["role"] == "user":
            _mark_last(m)
            break


def request_params(request: ModelRequest) -> tuple[dict[str, Any], list[str]]:
    """The keyword arguments for ``messages.stream`` and the betas the request needs (a
    non-empty list means the beta endpoint must be used)."""
    messages = _messages(request.messages)
    tools = [_tool(t) for t in request.tools]
    system = [{"type": "text", "text": request.system}] if request.system else None
    if request.cache:
        _add_cache_breakpoints(system, tools, messages)
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": messages,
    }
    if system is not None:
        params["system"] = system if request.cache else request.system
    if tools:
        params["tools"] = tools
    if request.thinking_budget is not None:
        params["thinking"] = {"type": "enabled", "budget_tokens": request.thinking_budget}
    if request.stop_sequences:
        params["stop_sequences"] = list(request.stop_sequences)
    betas: list[str] = []
    if request.context_edits:
        params["context_management"], betas = _context_management(request.context_edits)
    return params, betas


def count_tokens_params(request: ModelRequest) -> tuple[dict[str, Any], list[str]]:
    """The keyword arguments for ``messages.count_tokens`` (no cache markers, no max_tokens)."""
    params: dict[str, Any] = {"model": request.model, "messages": _messages(request.messages)}
    if request.system:
        params["system"] = request.system
    if request.tools:
        params["tools"] = [_tool(t) for t in request.tools]
    if request.thinking_budget is not None:
        params["thinking"] = {"type": "enabled", "budget_tokens": request.thinking_budget}
    betas: list[str] = []
    if request.context_edits:
        params["context_management"], betas = _context_management(request.context_edits)
    return params, betas


def _block_dict(block: Any) -> dict[str, Any]:
    """An SDK content block as the API's JSON: only the keys the response carried."""
    data: dict[str, Any] = block.model_dump(mode="json", exclude_unset=True)
    kind = data.get("type")
    # The stream accumulator fills optional keys with None; the API's JSON leaves them out.
    # A compaction block's content and encrypted_content keep an explicit null (it matters).
    keep_null = {"content", "encrypted_content"} if kind == "compaction" else set()
    return {k: v for k, v in data.items() if v is not None or k in keep_null}


def assistant_message(final: Any) -> AssistantMessage:
    """The persisted event for a complete SDK ``Message`` / ``BetaMessage``."""
    content = [_block_dict(b) for b in final.content]
    message = message_from_dict({"role": "assistant", "content": content}, where="response")
    u = final.usage
    usage = Usage(
        input_tokens=_count(getattr(u, "input_tokens", 0)),
        output_tokens=_count(getattr(u, "output_tokens", 0)),
        cache_creation_input_tokens=_count(getattr(u, "cache_creation_input_tokens", 0)),
        cache_read_input_tokens=_count(getattr(u, "cache_read_input_tokens", 0)),
    )
    return AssistantMessage(
        content=message.content,
        usage=usage,
        stop_reason=_text(final.stop_reason),
        model=_text(final.model),
    )


def _count(value: Any) -> int:
    """A usage number as the log can store it (a non-negative int within 63 bits)."""
    try:
        number = int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0
    return max(0, min(number, _INT_MAX))


def _text(value: Any) -> str | None:
    """A string field of the response as the log can store it (surrogates replaced)."""
    if not isinstance(value, str):
        return None
    if value.isascii():
        return value
    return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def applied_edits(final: Any) -> tuple[AppliedEdit, ...]:
    """What the response's ``context_management.applied_edits`` says was cleared."""
    cm = getattr(final, "context_management", None)
    if cm is None:
        return ()
    entries: Iterable[Any] = (
        cm.get("applied_edits", []) if isinstance(cm, dict) else getattr(cm, "applied_edits", [])
    ) or []
    out = []
    for entry in entries:
        d = entry if isinstance(entry, dict) else entry.model_dump(mode="json")
        out.append(
            AppliedEdit(
                type=str(d.get("type", "")),
                cleared_tool_uses=d.get("cleared_tool_uses"),
                cleared_thinking_turns=d.get("cleared_thinking_turns"),
                cleared_input_tokens=d.get("cleared_input_tokens"),
            )
        )
    return tuple(out)
