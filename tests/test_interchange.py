"""Interchange: messages to and from the Anthropic Messages API shape, losslessly, with clear errors
for malformed input; also through the event log, on generated and on recorded real data."""

from __future__ import annotations

import datetime
import json
import math
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import UNSET

from liteagent.eventlog import (
    Checkpointer,
    file_checkpointer,
    memory_checkpointer,
    messages_from_dicts,
    messages_to_dicts,
)
from liteagent.eventlog._interchange import message_from_dict, message_to_dict
from liteagent.eventlog._nesting import MAX_MESSAGE_NESTING, nests_deeper
from liteagent.eventlog.errors import InvalidMessageError
from liteagent.eventlog.types import (
    AssistantMessage,
    Block,
    Compaction,
    CompactionBlock,
    Message,
    RawBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserPrompt,
)


def _user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def _one_block(block: dict[str, Any]) -> Block:
    return message_from_dict(_user(block)).content[0]


def _round_trip(block: dict[str, Any]) -> dict[str, Any]:
    content: list[dict[str, Any]] = message_to_dict(message_from_dict(_user(block)))["content"]
    return content[0]


# -- each block type -----------------------------------------------------------------------------

_TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}


def test_text_block_from_dict() -> None:
    """A text block becomes a TextBlock."""
    assert TextBlock("hi") == _one_block({"type": "text", "text": "hi"})


def test_text_block_to_dict() -> None:
    """A TextBlock becomes a text block."""
    message = Message("assistant", (TextBlock("hi"),))
    expected = {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}
    assert expected == message_to_dict(message)


def test_tool_use_block_from_dict() -> None:
    """A tool_use block becomes a ToolUseBlock with id, name and input."""
    assert ToolUseBlock("toolu_1", "bash", {"command": "ls"}) == _one_block(_TOOL_USE)


def test_tool_use_block_round_trips() -> None:
    """A tool_use block converts back to the same dict."""
    assert _TOOL_USE == _round_trip(_TOOL_USE)


def test_tool_result_with_string_content() -> None:
    """A tool_result with string content keeps the string."""
    block = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "out"}
    assert ToolResultBlock("toolu_1", "out") == _one_block(block)


def test_tool_result_with_list_content() -> None:
    """A tool_result with list content holds the converted blocks, images kept raw."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A"}}
    block = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "text", "text": "out"}, image],
    }
    expected = ToolResultBlock("toolu_1", (TextBlock("out"), RawBlock(image)))
    assert expected == _one_block(block)


def test_tool_result_with_list_content_round_trips() -> None:
    """A tool_result with list content converts back to the same dict."""
    block = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "text", "text": "out", "cache_control": {"type": "ephemeral"}}],
    }
    assert block == _round_trip(block)


def test_tool_result_with_empty_list_content_round_trips() -> None:
    """An empty list content stays an empty list (not absent)."""
    block = {"type": "tool_result", "tool_use_id": "toolu_1", "content": []}
    assert block == _round_trip(block)


def test_tool_result_without_content() -> None:
    """A tool_result without content has content UNSET and converts back without it."""
    block = {"type": "tool_result", "tool_use_id": "toolu_1"}
    assert (ToolResultBlock("toolu_1"), block) == (_one_block(block), _round_trip(block))


@pytest.mark.parametrize("is_error", [True, False])
def test_tool_result_is_error_kept(is_error: bool) -> None:
    """is_error true or false is kept and written back."""
    block = {"type": "tool_result", "tool_use_id": "t", "content": "x", "is_error": is_error}
    expected = ToolResultBlock("t", "x", is_error)
    assert (expected, block) == (_one_block(block), _round_trip(block))


def test_tool_result_is_error_absent_stays_absent() -> None:
    """An absent is_error is UNSET and not written back."""
    block = {"type": "tool_result", "tool_use_id": "t", "content": "x"}
    assert (UNSET, block) == (_one_block(block).is_error, _round_trip(block))  # type: ignore[union-attr]


def test_thinking_with_signature() -> None:
    """A thinking block keeps its signature."""
    block = {"type": "thinking", "thinking": "hmm", "signature": "c2ln"}
    assert (ThinkingBlock("hmm", "c2ln"), block) == (_one_block(block), _round_trip(block))


def test_thinking_without_signature() -> None:
    """A thinking block without signature has it UNSET and writes none back."""
    block = {"type": "thinking", "thinking": "hmm"}
    assert (ThinkingBlock("hmm"), block) == (_one_block(block), _round_trip(block))


def test_thinking_with_empty_signature() -> None:
    """An empty signature is kept, distinct from an absent one."""
    block = {"type": "thinking", "thinking": "hmm", "signature": ""}
    assert (ThinkingBlock("hmm", ""), block) == (_one_block(block), _round_trip(block))


def test_redacted_thinking() -> None:
    """A redacted_thinking block keeps its data."""
    block = {"type": "redacted_thinking", "data": "ZW5j"}
    assert (RedactedThinkingBlock("ZW5j"), block) == (_one_block(block), _round_trip(block))


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ({"type": "compaction", "content": "summary"}, CompactionBlock("summary")),
        ({"type": "compaction", "content": None}, CompactionBlock(None)),
        ({"type": "compaction"}, CompactionBlock()),
        (
            {"type": "compaction", "content": "s", "encrypted_content": "e"},
            CompactionBlock("s", "e"),
        ),
        ({"type": "compaction", "encrypted_content": None}, CompactionBlock(UNSET, None)),
    ],
    ids=["content-str", "content-null", "content-absent", "encrypted", "encrypted-null"],
)
def test_compaction_block(block: dict[str, Any], expected: CompactionBlock) -> None:
    """A compaction block keeps content / encrypted_content as string, null or absent."""
    assert (expected, block) == (_one_block(block), _round_trip(block))


def test_unknown_block_type_becomes_raw_block() -> None:
    """A block of a type liteagent does not model is kept whole as a RawBlock."""
    block = {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}
    assert (RawBlock(block), block) == (_one_block(block), _round_trip(block))


def test_server_tool_block_becomes_raw_block() -> None:
    """A server tool block (another unmodelled type) is kept whole too."""
    block = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    assert (RawBlock(block), block) == (_one_block(block), _round_trip(block))


# -- extra keys and string content ----------------------------------------------------------------


def test_cache_control_kept_in_extra() -> None:
    """A cache_control key on a block is kept in extra and written back."""
    block = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
    expected = TextBlock("hi", extra={"cache_control": {"type": "ephemeral"}})
    assert (expected, block) == (_one_block(block), _round_trip(block))


def test_citations_kept_in_extra() -> None:
    """A citations key on a text block is kept in extra and written back."""
    citations = [{"type": "char_location", "cited_text": "x", "start_char_index": 0}]
    block = {"type": "text", "text": "hi", "citations": citations}
    assert (TextBlock("hi", extra={"citations": citations}), block) == (
        _one_block(block),
        _round_trip(block),
    )


def test_extra_keys_on_tool_use_kept() -> None:
    """Unknown keys on a tool_use block are kept beside the modelled ones."""
    block = {**_TOOL_USE, "cache_control": {"type": "ephemeral"}, "caller": None}
    assert block == _round_trip(block)


def test_message_level_extra_keys_kept() -> None:
    """Keys of a message other than role and content are kept in the message's extra."""
    d = {"role": "user", "content": [], "id": "msg_1"}
    message = message_from_dict(d)
    assert (Message("user", (), extra={"id": "msg_1"}), d) == (message, message_to_dict(message))


def test_string_content_becomes_one_text_block_marked_as_a_string() -> None:
    """A string content becomes one text block, the message marked string_content."""
    expected = Message("user", (TextBlock("hi"),), string_content=True)
    assert expected == message_from_dict({"role": "user", "content": "hi"})


def test_empty_string_content_becomes_one_empty_text_block() -> None:
    """An empty string content still becomes one (empty) text block."""
    assert Message("user", (TextBlock(""),), string_content=True) == message_from_dict(
        {"role": "user", "content": ""}
    )


def test_string_content_converts_back_as_a_string() -> None:
    """A message read from string content converts back with the same string content."""
    d = {"role": "assistant", "content": "hi", "id": "msg_1"}
    assert d == message_to_dict(message_from_dict(d))


def test_list_content_of_one_text_block_stays_a_list() -> None:
    """A list holding one text block is not turned into a string."""
    d = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    assert (False, d) == (
        message_from_dict(d).string_content,
        message_to_dict(message_from_dict(d)),
    )


def test_string_content_with_a_lone_surrogate_is_stored_losslessly() -> None:
    """A string content the log cannot store is one raw text block kept as JSON text, and
    converts back to the same string."""
    d = {"role": "user", "content": "a\ud800"}
    message = message_from_dict(d)
    raw = RawBlock({"type": "text"}, json='{"type":"text","text":"a\\ud800"}')
    expected = Message("user", (raw,), string_content=True)
    assert (expected, d) == (message, message_to_dict(message))


@pytest.mark.parametrize(
    "content",
    [
        (TextBlock("a"), TextBlock("b")),
        (),
        (TextBlock("a", extra={"citations": []}),),
        (RawBlock({"type": "x", "text": "a"}),),
        (ThinkingBlock("a"),),
    ],
    ids=["two-texts", "empty", "text-with-extra", "raw-with-text-key", "thinking"],
)
def test_a_string_content_mark_on_other_content_gives_a_list(content: tuple[Block, ...]) -> None:
    """A message marked string_content whose content is not one plain text block (e.g. a pass
    added a block) converts with list content, as an unmarked one."""
    marked = Message("user", content, string_content=True)
    assert message_to_dict(Message("user", content)) == message_to_dict(marked)


def test_a_string_content_mark_that_is_not_a_bool_is_refused() -> None:
    """string_content must be a bool."""
    with pytest.raises(InvalidMessageError, match="string_content must be a bool"):
        message_to_dict(Message("user", (TextBlock("a"),), string_content=1))  # type: ignore[arg-type]


def test_consecutive_messages_of_one_role_stay_separate() -> None:
    """Two user messages in a row stay two messages, in both directions."""
    ds = [
        {"role": "user", "content": "a"},
        {"role": "user", "content": [{"type": "text", "text": "b"}]},
    ]
    assert (2, ds) == (len(messages_from_dicts(ds)), messages_to_dicts(messages_from_dicts(ds)))


def test_messages_keep_their_order() -> None:
    """messages_from_dicts / messages_to_dicts keep the order of messages."""
    ds = [_user({"type": "text", "text": str(i)}) for i in range(5)]
    assert ds == messages_to_dicts(messages_from_dicts(ds))


def test_empty_list_of_messages() -> None:
    """No dicts give no messages, and back."""
    assert ([], []) == (messages_from_dicts([]), messages_to_dicts([]))


# -- values are copied ---------------------------------------------------------------------------


def _nested_dict() -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {
                "type": "tool_use",
                "id": "t",
                "name": "n",
                "input": {"xs": [1, {"y": 2}]},
                "cache_control": {"type": "ephemeral"},
            },
            {"type": "image", "source": {"data": "A"}},
            {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "a"}]},
        ],
        "meta": {"k": [1]},
    }


def _mutate(d: dict[str, Any]) -> None:
    d["content"][0]["input"]["xs"][1]["y"] = 99
    d["content"][0]["input"]["new"] = True
    d["content"][0]["cache_control"]["type"] = "changed"
    d["content"][1]["source"]["data"] = "B"
    d["content"][2]["content"][0]["text"] = "changed"
    d["content"].append({"type": "text", "text": "extra"})
    d["meta"]["k"].append(2)


def test_mutating_input_dict_after_conversion_does_not_change_message() -> None:
    """Changing the input dicts after message_from_dict leaves the Message unchanged."""
    d = _nested_dict()
    message = message_from_dict(d)
    _mutate(d)
    assert message_from_dict(_nested_dict()) == message


def test_mutating_output_dict_does_not_change_message() -> None:
    """Changing the dicts message_to_dict returned leaves the Message unchanged."""
    message = message_from_dict(_nested_dict())
    out = message_to_dict(message)
    _mutate(out)
    assert (message_from_dict(_nested_dict()), _nested_dict()) == (
        message,
        message_to_dict(message),
    )


def test_two_conversions_share_no_values() -> None:
    """Two dicts converted from one Message do not share nested values."""
    message = message_from_dict(_nested_dict())
    first, second = message_to_dict(message), message_to_dict(message)
    _mutate(first)
    assert _nested_dict() == second


# -- errors --------------------------------------------------------------------------------------

_OK = {"role": "user", "content": "fine"}


def _raises_naming(pattern: str, dicts: Any) -> None:
    with pytest.raises(InvalidMessageError, match=pattern):
        messages_from_dicts(dicts)


def test_bad_role_names_message_and_role() -> None:
    """A role other than user/assistant raises naming the message index and the role."""
    _raises_naming(
        re.escape("message 1: role must be 'user' or 'assistant', got 'system'"),
        [_OK, {"role": "system", "content": "x"}],
    )


def test_missing_role_names_the_field() -> None:
    """A message without role raises naming the field."""
    _raises_naming(re.escape("message 0: missing required field 'role'"), [{"content": "x"}])


def test_non_str_role_names_the_field() -> None:
    """A role that is not a string raises naming the field and type."""
    _raises_naming(r"message 0: field 'role' must be str, got int", [{"role": 1, "content": "x"}])


def test_missing_content_names_message() -> None:
    """A message without content raises naming the message index and field."""
    _raises_naming(
        re.escape("message 2: missing required field 'content'"), [_OK, _OK, {"role": "user"}]
    )


@pytest.mark.parametrize("content", [None, 5, {"type": "text", "text": "x"}, True])
def test_content_not_str_or_list_names_field(content: Any) -> None:
    """A content that is neither a string nor a list raises naming the field."""
    _raises_naming(
        r"message 0: field 'content' must be str or list, got",
        [{"role": "user", "content": content}],
    )


@pytest.mark.parametrize("message", ["hi", None, ["role", "user"]], ids=repr)
def test_message_not_an_object(message: Any) -> None:
    """A message that is not a dict raises naming its index."""
    _raises_naming(r"message 1: a message must be an object", [_OK, message])


@pytest.mark.parametrize("block", ["text", None, 3, ["type", "text"]], ids=repr)
def test_block_not_a_dict_names_block(block: Any) -> None:
    """A content block that is not a dict raises naming the message and block index."""
    _raises_naming(
        re.escape("message 0 content[1]: a block must be an object"),
        [_user({"type": "text", "text": "a"}, block)],
    )


def test_block_missing_type_names_block() -> None:
    """A block without type raises naming the block and the field."""
    _raises_naming(
        re.escape("message 0 content[0]: missing required field 'type'"), [_user({"text": "a"})]
    )


def test_block_non_str_type_names_block() -> None:
    """A block whose type is not a string raises naming the field."""
    _raises_naming(
        re.escape("message 0 content[0]: field 'type' must be str"), [_user({"type": 7})]
    )


def test_tool_use_without_id_names_block_and_field() -> None:
    """A tool_use without id raises naming the block, its type and the field."""
    block = {"type": "tool_use", "name": "bash", "input": {}}
    _raises_naming(
        re.escape("message 0 content[0] (tool_use): missing required field 'id'"), [_user(block)]
    )


@pytest.mark.parametrize("value", [[1, 2], "{}", None, 3])
def test_tool_use_input_not_a_dict(value: Any) -> None:
    """A tool_use input that is not an object raises naming the field."""
    block = {**_TOOL_USE, "input": value}
    _raises_naming(
        re.escape("message 0 content[0] (tool_use): field 'input' must be dict"), [_user(block)]
    )


@pytest.mark.parametrize("value", [1, 0, "true", None])
def test_is_error_not_bool(value: Any) -> None:
    """An is_error that is not a bool raises naming the field."""
    block = {"type": "tool_result", "tool_use_id": "t", "content": "x", "is_error": value}
    _raises_naming(
        re.escape("message 0 content[0] (tool_result): field 'is_error' must be bool"),
        [_user(block)],
    )


def test_text_not_str_names_field() -> None:
    """A text block whose text is not a string raises naming the field."""
    _raises_naming(
        re.escape("message 0 content[0] (text): field 'text' must be str, got bool"),
        [_user({"type": "text", "text": True})],
    )


def test_compaction_content_wrong_type_names_field() -> None:
    """A compaction content that is neither string nor null raises naming the field."""
    _raises_naming(
        re.escape("field 'content' must be str or null, got int"),
        [_user({"type": "compaction", "content": 3})],
    )


def test_error_inside_tool_result_content_names_nested_block() -> None:
    """An error inside a tool_result's list content names the nested block index."""
    block = {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text"}]}
    _raises_naming(
        re.escape("message 0 content[0] (tool_result) content[0] (text): missing required field"),
        [_user(block)],
    )


@pytest.mark.parametrize("value", [object(), 1j], ids=["object", "complex"])
def test_unencodable_value_in_input_raises(value: Any) -> None:
    """A value in a tool input that is not plain data raises naming the block."""
    block = {**_TOOL_USE, "input": {"x": [value]}}
    _raises_naming(
        re.escape("message 0 content[0] (tool_use): not plain JSON data"), [_user(block)]
    )


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_a_number_json_has_no_form_for_is_kept_as_python_data(number: float) -> None:
    """NaN and the infinities are Python data the log stores (a model's tool input may hold
    one): kept both ways, never refused, so a conversation holding one is never wedged. (The
    CLI reads transcripts strictly and refuses them there; the provider sends them as null.)"""
    message = Message("user", (ToolUseBlock("t", "bash", {"x": [number]}),))
    (back,) = messages_from_dicts(messages_to_dicts([message]))
    (kept,) = back.content
    assert isinstance(kept, ToolUseBlock)
    assert math.isnan(number) == math.isnan(kept.input["x"][0])
    assert math.isnan(number) or number == kept.input["x"][0]


def test_blocks_nested_beyond_the_stack_are_refused_in_a_short_message() -> None:
    """A tool_result nested thousands of times is refused with InvalidMessageError (never a
    RecursionError), whatever the caller's stack depth, in a message of bounded length."""
    value: dict[str, Any] = {"type": "text", "text": "x"}
    for _ in range(5000):
        value = {"type": "tool_result", "tool_use_id": "x", "content": [value]}

    def at_depth(n: int) -> None:
        if n:
            at_depth(n - 1)
            return
        with pytest.raises(InvalidMessageError) as raised:
            messages_from_dicts([_user(value)])
        assert len(str(raised.value)) < 300

    for depth in range(0, 60, 7):
        at_depth(depth)


def test_unencodable_value_in_extra_raises() -> None:
    """A value in an extra key that is not plain data raises naming the block."""
    block = {"type": "text", "text": "a", "cache_control": object()}
    _raises_naming(re.escape("message 0 content[0] (text): not plain JSON data"), [_user(block)])


@pytest.mark.parametrize(
    "value",
    [{1, 2}, frozenset({1}), datetime.date(2020, 1, 1), b"raw", {1: "int key"}],
    ids=["set", "frozenset", "date", "bytes", "int-key"],
)
def test_non_json_value_in_input_raises(value: Any) -> None:
    """A set, date, bytes or non-str key in a tool input raises InvalidMessageError."""
    block = {**_TOOL_USE, "input": {"x": value}}
    _raises_naming(re.escape("message 0 content[0] (tool_use)"), [_user(block)])


@pytest.mark.parametrize("dicts", ["[]", b"[]", {"role": "user", "content": "x"}], ids=repr)
def test_top_level_not_a_list_raises(dicts: Any) -> None:
    """A str, bytes or dict instead of a list of messages raises InvalidMessageError."""
    _raises_naming(r"expected a list of message dicts, got", dicts)


@pytest.mark.parametrize("dicts", [None, 5, 1.5], ids=repr)
def test_top_level_non_iterable_raises_invalid_message(dicts: Any) -> None:
    """None or a number instead of a list of messages raises InvalidMessageError."""
    _raises_naming(r"expected a list of message dicts, got", dicts)


@pytest.mark.parametrize("value", [{"role": "user", "content": []}, None, "x"], ids=repr)
def test_message_to_dict_rejects_non_message(value: Any) -> None:
    """message_to_dict of something that is not a Message raises InvalidMessageError."""
    with pytest.raises(InvalidMessageError, match="expected a Message"):
        message_to_dict(value)


def test_errors_are_value_errors() -> None:
    """InvalidMessageError is also a ValueError, for callers that catch that."""
    with pytest.raises(ValueError, match="role must be"):
        messages_from_dicts([{"role": "tool", "content": "x"}])


# -- Messages whose round trip the module docstring promises -------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        Message("user", (TextBlock("x", extra={}),)),
        Message("user", (), extra={}),
        Message("user", (TextBlock("x", extra={"type": "image"}),)),
        Message("user", (TextBlock("x", extra={"text": "y"}),)),
        Message("user", (), extra={"role": "assistant"}),
        Message("user", (RawBlock({"type": "text", "text": "x"}),)),
        Message("user", (RawBlock({"no_type": 1}),)),
        Message("user", (TextBlock("x", extra={"cache_control": {"type": "ephemeral"}}),)),
    ],
    ids=[
        "empty-block-extra",
        "empty-message-extra",
        "extra-type-key",
        "extra-text-key",
        "extra-role-key",
        "raw-of-known-type",
        "raw-without-type",
        "ordinary-extra",
    ],
)
def test_edge_message_round_trips_or_is_refused(message: Message) -> None:
    """A Message survives dicts and back unchanged, or the conversion raises InvalidMessageError."""
    try:
        back = messages_from_dicts(messages_to_dicts([message]))
    except InvalidMessageError:
        return
    assert [message] == back


# -- properties ----------------------------------------------------------------------------------

_KNOWN_KEYS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text"}),
    "tool_use": frozenset({"type", "id", "name", "input"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error"}),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
    "compaction": frozenset({"type", "content", "encrypted_content"}),
}
_MESSAGE_KEYS = frozenset({"role", "content"})

_json: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_json_object = st.dictionaries(st.text(max_size=6), _json, max_size=3)
_text = st.text(max_size=12)
_unknown_type = st.text(min_size=1, max_size=10).filter(lambda t: t not in _KNOWN_KEYS)


def _keys_except(known: frozenset[str]) -> st.SearchStrategy[str]:
    return st.text(min_size=1, max_size=8).filter(lambda k: k not in known)


def _extra_keys(known: frozenset[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(_keys_except(known), _json, max_size=2)


# API-shaped dicts


def _dict_block(kind: str, required: dict[str, Any], optional: dict[str, Any] | None = None) -> Any:
    base = st.fixed_dictionaries({"type": st.just(kind), **required}, optional=optional or {})
    return st.tuples(_extra_keys(_KNOWN_KEYS[kind]), base).map(lambda t: {**t[0], **t[1]})


_raw_dict = st.tuples(_unknown_type, _extra_keys(frozenset({"type"}))).map(
    lambda t: {**t[1], "type": t[0]}
)
_nullable_text = st.none() | _text
_leaf_dict = st.one_of(
    _dict_block("text", {"text": _text}),
    _dict_block("tool_use", {"id": _text, "name": _text, "input": _json_object}),
    _dict_block("thinking", {"thinking": _text}, {"signature": _text}),
    _dict_block("redacted_thinking", {"data": _text}),
    _dict_block("compaction", {}, {"content": _nullable_text, "encrypted_content": _nullable_text}),
    _raw_dict,
)
_block_dict = _leaf_dict | _dict_block(
    "tool_result",
    {"tool_use_id": _text},
    {"content": _text | st.lists(_leaf_dict, max_size=3), "is_error": st.booleans()},
)
_message_dict = st.tuples(
    _extra_keys(_MESSAGE_KEYS),
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant"]),
            "content": st.lists(_block_dict, max_size=4),
        }
    ),
).map(lambda t: {**t[0], **t[1]})

# Message objects


def _extra(known: frozenset[str]) -> st.SearchStrategy[Any]:
    return st.just(UNSET) | st.dictionaries(_keys_except(known), _json, min_size=1, max_size=2)


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.just(UNSET) | strategy


_leaf_block: st.SearchStrategy[Block] = st.one_of(
    st.builds(TextBlock, _text, extra=_extra(_KNOWN_KEYS["text"])),
    st.builds(ToolUseBlock, _text, _text, _json_object, extra=_extra(_KNOWN_KEYS["tool_use"])),
    st.builds(ThinkingBlock, _text, _maybe(_text), extra=_extra(_KNOWN_KEYS["thinking"])),
    st.builds(RedactedThinkingBlock, _text, extra=_extra(_KNOWN_KEYS["redacted_thinking"])),
    st.builds(
        CompactionBlock,
        _maybe(_nullable_text),
        _maybe(_nullable_text),
        extra=_extra(_KNOWN_KEYS["compaction"]),
    ),
    _raw_dict.map(RawBlock),
)
_block: st.SearchStrategy[Block] = _leaf_block | st.builds(
    ToolResultBlock,
    _text,
    _maybe(_text | st.lists(_leaf_block, max_size=3).map(tuple)),
    _maybe(st.booleans()),
    extra=_extra(_KNOWN_KEYS["tool_result"]),
)
_message = st.builds(
    Message,
    st.sampled_from(["user", "assistant"]),
    st.lists(_block, max_size=4).map(tuple),
    extra=_extra(_MESSAGE_KEYS),
) | st.builds(  # content written as a string
    Message,
    st.sampled_from(["user", "assistant"]),
    _text.map(lambda t: (TextBlock(t),)),
    extra=_extra(_MESSAGE_KEYS),
    string_content=st.just(True),
)

_PROPERTY_SETTINGS = settings(max_examples=60, deadline=None)


@_PROPERTY_SETTINGS
@given(ms=st.lists(_message, max_size=4))
def test_messages_round_trip(ms: list[Message]) -> None:
    """messages_from_dicts(messages_to_dicts(ms)) == ms for Messages with disjoint extras."""
    assert ms == messages_from_dicts(messages_to_dicts(ms))


def _as_event(message: Message) -> UserPrompt | AssistantMessage:
    if message.role == "user":
        return UserPrompt(content=message.content)
    return AssistantMessage(content=message.content)


def _read_messages(cp: Checkpointer, sid: str) -> list[Message]:
    out = []
    for stored in cp.read(sid):
        body = stored.body
        assert isinstance(body, (UserPrompt, AssistantMessage))
        out.append(Message("user" if isinstance(body, UserPrompt) else "assistant", body.content))
    return out


@_PROPERTY_SETTINGS
@given(ms=st.lists(_message, max_size=4))
def test_message_content_survives_event_storage(ms: list[Message]) -> None:
    """A Message stored as a UserPrompt/AssistantMessage and read back has the same content."""
    with memory_checkpointer() as cp:
        cp.append("s", [_as_event(m) for m in ms])
        assert [Message(m.role, m.content) for m in ms] == _read_messages(cp, "s")


@_PROPERTY_SETTINGS
@given(ds=st.lists(_message_dict, max_size=4))
def test_dicts_survive_event_storage(ds: list[dict[str, Any]]) -> None:
    """API dicts (without message-level extras) stored as events read back as the same dicts."""
    ds = [{"role": d["role"], "content": d["content"]} for d in ds]
    with memory_checkpointer() as cp:
        cp.append("s", [_as_event(m) for m in messages_from_dicts(ds)])
        assert ds == messages_to_dicts(_read_messages(cp, "s"))


# -- recorded real data --------------------------------------------------------------------------


def _load(path: Path) -> list[Any]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.realdata
def test_real_trajectories_round_trip_exactly(trajectory_files: list[Path]) -> None:
    """Every recorded trajectory converts to Messages and back to exactly the same dicts."""
    mismatched = []
    for path in trajectory_files:
        lines = _load(path)
        if lines != messages_to_dicts(messages_from_dicts(lines)):
            mismatched.append(path.name)
    assert [] == mismatched


@pytest.mark.realdata
def test_real_trajectories_survive_file_checkpointer(
    trajectory_files: list[Path], tmp_path: Path
) -> None:
    """Every recorded trajectory stored as events in a file checkpointer reads back exactly."""
    mismatched = []
    with file_checkpointer(tmp_path) as cp:
        for i, path in enumerate(trajectory_files):
            lines = _load(path)
            sid = f"t{i}"
            cp.append(sid, [_as_event(m) for m in messages_from_dicts(lines)])
            if lines != messages_to_dicts(_read_messages(cp, sid)):
                mismatched.append(path.name)
    assert [] == mismatched


# -- values the log cannot store -----------------------------------------------------------------

_UNSTORABLE = [2**64, -(2**63) - 1, 10**40, "a\ud800b", "\udcff"]
_UNSTORABLE_IDS = ["2**64", "-2**63-1", "10**40", "lone-high", "lone-low"]


@pytest.mark.parametrize("value", _UNSTORABLE, ids=_UNSTORABLE_IDS)
def test_an_unstorable_tool_input_is_kept_as_its_json_text(value: Any) -> None:
    """A tool input holding an integer beyond 64 bits or a lone surrogate becomes input {} with
    input_json, its canonical JSON text, and converts back to the exact input."""
    block = {**_TOOL_USE, "input": {"x": [value], "ok": 1}}
    got = _one_block(block)
    assert (
        ToolUseBlock(
            "toolu_1",
            "bash",
            {},
            input_json=json.dumps({"x": [value], "ok": 1}, separators=(",", ":")),
        )
        == got
    )
    assert block == _round_trip(block)


def test_a_lone_surrogate_in_a_key_is_kept_as_json_text() -> None:
    """A key with a lone surrogate makes the input unstorable too."""
    block = {**_TOOL_USE, "input": {"\ud800": 1}}
    assert '{"\\ud800":1}' == _one_block(block).input_json  # type: ignore[union-attr]
    assert block == _round_trip(block)


@pytest.mark.parametrize("value", _UNSTORABLE, ids=_UNSTORABLE_IDS)
def test_any_other_unstorable_block_is_a_raw_block_with_its_json_text(value: Any) -> None:
    """A text block with a lone surrogate, or a block whose extra holds a huge integer, is kept
    whole as RawBlock(json=...) naming its type, and converts back exactly."""
    block = (
        {"type": "text", "text": value}
        if isinstance(value, str)
        else {"type": "text", "text": "hi", "citations": [value]}
    )
    got = _one_block(block)
    assert RawBlock({"type": "text"}, json=json.dumps(block, separators=(",", ":"))) == got
    assert block == _round_trip(block)


def test_an_unstorable_id_keeps_the_whole_tool_use_as_json() -> None:
    """A tool_use whose id holds a lone surrogate is kept as a raw block (the input alone
    cannot be split off)."""
    block = {**_TOOL_USE, "id": "t\ud800"}
    assert isinstance(_one_block(block), RawBlock)
    assert block == _round_trip(block)


def test_an_unstorable_block_inside_a_tool_result_is_converted_alone() -> None:
    """In a tool_result's list content only the unstorable inner block becomes a raw block."""
    inner = {"type": "text", "text": "\ud800"}
    block = {
        "type": "tool_result",
        "tool_use_id": "t",
        "content": [inner, {"type": "text", "text": "ok"}],
    }
    got = _one_block(block)
    assert isinstance(got, ToolResultBlock)
    assert (
        RawBlock({"type": "text"}, json='{"type":"text","text":"\\ud800"}'),
        TextBlock("ok"),
    ) == got.content
    assert block == _round_trip(block)


@pytest.mark.parametrize(
    "block",
    [{"type": "text", "text": "a\ud800\udc00"}, {**_TOOL_USE, "input": {"\udbff\udfff": 1}}],
    ids=["text", "input-key"],
)
def test_a_surrogate_pair_as_two_code_points_is_refused(block: dict[str, Any]) -> None:
    """A string holding a high surrogate followed by a low one (which JSON text cannot write:
    an escaped pair reads back as one character) is refused naming the block."""
    _raises_naming(
        re.escape("message 0 content[0] (") + ".*a high surrogate followed by a low", [_user(block)]
    )


def test_an_unstorable_message_extra_is_kept_as_json_text() -> None:
    """A message's own key holding a value the log cannot store as it is (an integer beyond 64
    bits, a lone surrogate) is kept as the canonical JSON text of its keys, which msgpack can
    store, and comes back exactly."""
    ds = [{"role": "user", "content": [], "meta": 2**64, "s": "\ud800", "n": 1}]
    (m,) = messages_from_dicts(ds)
    assert m.extra is UNSET
    assert '{"meta":18446744073709551616,"s":"\\ud800","n":1}' == m.extra_json
    assert m == msgspec.msgpack.decode(msgspec.msgpack.encode(m), type=Message)
    assert ds == messages_to_dicts([m])


def test_a_surrogate_pair_in_a_message_extra_is_refused() -> None:
    """As in a block: a pair of surrogates as two code points cannot be written as JSON."""
    _raises_naming(
        re.escape("message 0: an extra key holds a high surrogate followed by a low"),
        [{"role": "user", "content": [], "meta": "\ud800\udc00", "n": 2**64}],
    )


@pytest.mark.parametrize(
    ("extra_json", "match"),
    [
        ('{"n": 18446744073709551616}', "canonical JSON text"),  # not canonical
        ('{"n":1}', "canonical JSON text"),  # storable: would come back as extra
        ("[1]", "canonical JSON text"),
        ("{", "not JSON text"),
        (5, "canonical JSON text"),
        ('{"role":18446744073709551616}', "repeats modelled keys"),
    ],
)
def test_a_bad_extra_json_is_refused(extra_json: Any, match: str) -> None:
    """An extra_json that is not canonical, would be storable as extra, is not a JSON object or
    not a str, or repeats modelled keys is InvalidMessageError; so is one set beside extra."""
    with pytest.raises(InvalidMessageError, match=match):
        messages_to_dicts([Message("user", (), extra_json=extra_json)])
    with pytest.raises(InvalidMessageError, match="cannot both be set"):
        messages_to_dicts([Message("user", (), extra={"a": 1}, extra_json='{"n":1}')])


@pytest.mark.parametrize("where", ["input", "extra"])
def test_an_integer_too_long_to_write_as_json_is_refused(where: str) -> None:
    """An integer of more digits than Python writes as JSON is InvalidMessageError naming the
    block, not a bare ValueError."""
    block = (
        {**_TOOL_USE, "input": {"n": 10**5000}}
        if where == "input"
        else {"type": "text", "text": "x", "n": 10**5000}
    )
    with pytest.raises(InvalidMessageError, match=re.escape("message 0 content[0] (")):
        messages_from_dicts([_user(block)])


def test_a_native_unstorable_value_converts_to_its_storable_form() -> None:
    """message_to_dict accepts any JSON value; message_from_dict of the result is the storable
    form, which an event can hold."""
    m = Message("assistant", (ToolUseBlock("t", "n", {"n": 2**70}),))
    d = message_to_dict(m)
    assert {"n": 2**70} == d["content"][0]["input"]
    stored = message_from_dict(d)
    assert '{"n":1180591620717411303424}' == stored.content[0].input_json  # type: ignore
    with memory_checkpointer() as cp:
        cp.append("s", [AssistantMessage(content=stored.content)])
        assert [stored] == _read_messages(cp, "s")


@pytest.mark.parametrize(
    "block",
    [
        ToolUseBlock("t", "n", {}, input_json='{"n": 18446744073709551616}'),
        ToolUseBlock("t", "n", {}, input_json='{"n":1}'),
        ToolUseBlock("t", "n", {}, input_json="[18446744073709551616]"),
        ToolUseBlock("t", "n", {}, input_json="{"),
        ToolUseBlock("t", "n", {"a": 1}, input_json='{"n":18446744073709551616}'),
        RawBlock({"type": "x"}, json='{"type":"text","text":"\\ud800"}'),
        RawBlock({"type": "text"}, json='{"type":"text","text":"fine"}'),
    ],
    ids=[
        "not-canonical",
        "storable",
        "not-an-object",
        "not-json",
        "input-not-empty",
        "wrong-data",
        "raw-storable",
    ],
)
def test_a_lossless_form_that_would_not_convert_back_is_refused(block: Block) -> None:
    """input_json / json that message_from_dict would not have made raises InvalidMessageError."""
    with pytest.raises(InvalidMessageError):
        message_to_dict(Message("assistant", (block,)))


_SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def _json_text(text: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Strings JSON can write: no surrogate pair as two code points (see the test above)."""
    return text.filter(lambda t: _SURROGATE_PAIR.search(t) is None)


_wild_text = _json_text(
    st.text(alphabet=st.characters(categories=["Cs", "Ll"]), min_size=1, max_size=4)
)
_wild_scalar = st.integers(min_value=2**64) | st.integers(max_value=-(2**63) - 1) | _wild_text
_wild_json: st.SearchStrategy[Any] = st.recursive(
    _wild_scalar | st.integers(-5, 5) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            _json_text(st.text(alphabet=st.characters(categories=["Cs", "Ll"]), max_size=3)),
            inner,
            max_size=3,
        )
    ),
    max_leaves=6,
)
_wild_block = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.just("tool_use"),
            "id": st.text(max_size=3),
            "name": st.text(max_size=3),
            "input": st.dictionaries(st.text(max_size=3), _wild_json, max_size=3),
        }
    ),
    st.fixed_dictionaries({"type": st.just("text"), "text": _wild_text | st.text(max_size=3)}),
    st.fixed_dictionaries(
        {"type": st.just("thinking"), "thinking": st.text(max_size=3)},
        optional={"signature": _wild_text},
    ),
    st.fixed_dictionaries({"type": st.just("image"), "source": _wild_json}),
)
_wild_message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant"]),
        "content": st.lists(_wild_block | _leaf_dict, max_size=4),
    }
)


@_PROPERTY_SETTINGS
@given(ds=st.lists(_wild_message, max_size=3))
def test_any_json_message_is_stored_losslessly(ds: list[dict[str, Any]]) -> None:
    """Messages holding integers beyond 64 bits and lone surrogates anywhere in their blocks
    are stored as events, read back, and convert to exactly the same dicts."""
    with memory_checkpointer() as cp:
        cp.append("s", [_as_event(m) for m in messages_from_dicts(ds)])
        assert ds == messages_to_dicts(_read_messages(cp, "s"))


# -- valid Messages-API transcripts --------------------------------------------------------------
# Every block type of the Messages API (text with citations, images and documents from every kind
# of source, search results, tool_use and tool_result with nested content, thinking with its
# signature, redacted thinking, server and MCP tool blocks, container uploads, compaction), with
# cache_control, unknown keys at message and block level, string and list content, consecutive
# messages of one role, text with lone surrogates (JSON escapes in a file) and integers beyond
# 64 bits anywhere in a block or in a message's own keys.

_api_char = st.characters() | st.characters(categories=["Cs"])
_api_text = _json_text(st.text(_api_char, max_size=8))
_api_big = st.sampled_from([2**64, -(2**63) - 1, 10**40]) | st.integers(min_value=2**64)
_api_scalar = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | _api_big
    | st.floats(allow_nan=False, allow_infinity=False)
    | _api_text
)
_api_json: st.SearchStrategy[Any] = st.recursive(
    _api_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_api_text, inner, max_size=3),
    max_leaves=5,
)
_api_object = st.dictionaries(_api_text, _api_json, max_size=3)
_count = st.integers(0, 2**31)


def _api_block(
    kind: str, required: dict[str, Any], optional: dict[str, Any] | None = None
) -> st.SearchStrategy[dict[str, Any]]:
    """A block of type ``kind`` with its fields and, maybe, keys the API may add later."""
    fields = {"type", *required, *(optional or {})}
    unknown = st.dictionaries(_api_text.filter(lambda k: k not in fields), _api_json, max_size=1)
    known = st.fixed_dictionaries({"type": st.just(kind), **required}, optional=optional or {})
    return st.tuples(known, unknown).map(lambda t: {**t[0], **t[1]})


_cache = {
    "cache_control": st.fixed_dictionaries(
        {"type": st.just("ephemeral")}, optional={"ttl": st.sampled_from(["5m", "1h"])}
    )
}
_citation = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.just("char_location"),
            "cited_text": _api_text,
            "document_index": _count,
            "document_title": st.none() | _api_text,
            "start_char_index": _count,
            "end_char_index": _count,
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("page_location"),
            "cited_text": _api_text,
            "document_index": _count,
            "start_page_number": _count,
            "end_page_number": _count,
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("web_search_result_location"),
            "cited_text": _api_text,
            "url": _api_text,
            "title": _api_text,
            "encrypted_index": _api_text,
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("search_result_location"),
            "cited_text": _api_text,
            "source": _api_text,
            "search_result_index": _count,
            "start_block_index": _count,
            "end_block_index": _count,
        }
    ),
)
_api_textblock = _api_block(
    "text", {"text": _api_text}, {**_cache, "citations": st.lists(_citation, max_size=2)}
)
_plain_text = st.fixed_dictionaries({"type": st.just("text"), "text": _api_text})
_image = _api_block(
    "image",
    {
        "source": st.one_of(
            st.fixed_dictionaries(
                {
                    "type": st.just("base64"),
                    "media_type": st.sampled_from(
                        ["image/png", "image/jpeg", "image/gif", "image/webp"]
                    ),
                    "data": st.just("iVBORw0K"),
                }
            ),
            st.fixed_dictionaries({"type": st.just("url"), "url": _api_text}),
            st.fixed_dictionaries({"type": st.just("file"), "file_id": _api_text}),
        )
    },
    _cache,
)
_document = _api_block(
    "document",
    {
        "source": st.one_of(
            st.fixed_dictionaries(
                {
                    "type": st.just("base64"),
                    "media_type": st.just("application/pdf"),
                    "data": st.just("JVBERi0x"),
                }
            ),
            st.fixed_dictionaries(
                {"type": st.just("text"), "media_type": st.just("text/plain"), "data": _api_text}
            ),
            st.fixed_dictionaries(
                {"type": st.just("content"), "content": st.lists(_plain_text, max_size=2)}
            ),
            st.fixed_dictionaries({"type": st.just("url"), "url": _api_text}),
        )
    },
    {
        **_cache,
        "title": _api_text,
        "context": _api_text,
        "citations": st.fixed_dictionaries({"enabled": st.booleans()}),
    },
)
_search_result = _api_block(
    "search_result",
    {"source": _api_text, "title": _api_text, "content": st.lists(_plain_text, max_size=2)},
    {**_cache, "citations": st.fixed_dictionaries({"enabled": st.booleans()})},
)
_tool_result = _api_block(
    "tool_result",
    {"tool_use_id": _api_text},
    {
        **_cache,
        "is_error": st.booleans(),
        "content": _api_text
        | st.lists(_api_textblock | _image | _document | _search_result, max_size=3),
    },
)
_server_result_content = st.one_of(
    st.lists(
        st.fixed_dictionaries(
            {
                "type": st.just("web_search_result"),
                "url": _api_text,
                "title": _api_text,
                "encrypted_content": _api_text,
                "page_age": st.none() | _api_text,
            }
        ),
        max_size=2,
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("web_search_tool_result_error"),
            "error_code": st.sampled_from(["unavailable", "max_uses_exceeded"]),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("web_fetch_result"),
            "url": _api_text,
            "retrieved_at": _api_text,
            "content": _document,
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("code_execution_result"),
            "stdout": _api_text,
            "stderr": _api_text,
            "return_code": st.integers(),
            "content": st.lists(
                st.fixed_dictionaries(
                    {"type": st.just("code_execution_output"), "file_id": _api_text}
                ),
                max_size=1,
            ),
        }
    ),
)
_user_block = st.one_of(
    _api_textblock,
    _image,
    _document,
    _search_result,
    _tool_result,
    _api_block("container_upload", {"file_id": _api_text}),
)
_assistant_block = st.one_of(
    _api_textblock,
    _api_block("thinking", {"thinking": _api_text}, {"signature": _api_text}),
    _api_block("redacted_thinking", {"data": _api_text}),
    _api_block("tool_use", {"id": _api_text, "name": _api_text, "input": _api_object}, _cache),
    _api_block(
        "server_tool_use",
        {
            "id": _api_text,
            "name": st.sampled_from(
                ["web_search", "web_fetch", "code_execution", "bash_code_execution"]
            ),
            "input": _api_object,
        },
    ),
    *(
        _api_block(kind, {"tool_use_id": _api_text, "content": _server_result_content})
        for kind in (
            "web_search_tool_result",
            "web_fetch_tool_result",
            "code_execution_tool_result",
            "bash_code_execution_tool_result",
        )
    ),
    _api_block(
        "mcp_tool_use",
        {"id": _api_text, "name": _api_text, "server_name": _api_text, "input": _api_object},
    ),
    _api_block(
        "mcp_tool_result",
        {
            "tool_use_id": _api_text,
            "is_error": st.booleans(),
            "content": _api_text | st.lists(_plain_text, max_size=2),
        },
    ),
    _api_block("compaction", {"content": st.none() | _api_text}),
)


def _api_message(role: str, blocks: st.SearchStrategy[dict[str, Any]]) -> Any:
    content = _api_text | st.lists(blocks, max_size=4)
    unknown = st.dictionaries(
        _api_text.filter(lambda k: k not in _MESSAGE_KEYS), _api_json, max_size=2
    )
    return st.tuples(
        st.fixed_dictionaries({"role": st.just(role), "content": content}), unknown
    ).map(lambda t: {**t[0], **t[1]})


transcripts = st.lists(
    _api_message("user", _user_block) | _api_message("assistant", _assistant_block), max_size=5
)
"""Valid Messages-API transcripts (lists of message dicts); see the comment above."""


def as_json(value: Any) -> str:
    """``value`` as JSON text that tells apart what == does not (1, 1.0 and True)."""
    return json.dumps(value, sort_keys=True)


@settings(max_examples=150, deadline=None)
@given(ds=transcripts)
def test_every_api_transcript_round_trips(ds: list[dict[str, Any]]) -> None:
    """messages_to_dicts(messages_from_dicts(ds)) is ds for every valid transcript: unknown keys,
    string content and consecutive messages of one role kept, every value exact."""
    assert as_json(ds) == as_json(messages_to_dicts(messages_from_dicts(ds)))


@_PROPERTY_SETTINGS
@given(ds=transcripts)
def test_every_api_transcript_is_stored_whole_in_the_log(ds: list[dict[str, Any]]) -> None:
    """The messages of any transcript, stored in the log (a compaction's replacement holds whole
    messages) and read back, are equal and convert to the same dicts."""
    messages = messages_from_dicts(ds)
    with memory_checkpointer() as cp:
        cp.append(
            "s",
            [
                Compaction(
                    first_seq=1,
                    last_seq=1,
                    tokens_before=0,
                    tokens_after=0,
                    replacement=tuple(messages),
                )
            ],
        )
        (stored,) = cp.read("s")
    assert isinstance(stored.body, Compaction)
    assert (messages, as_json(ds)) == (
        list(stored.body.replacement),
        as_json(messages_to_dicts(stored.body.replacement)),
    )


def _deep_message(levels: int) -> dict[str, Any]:
    """A user message dict nesting ``levels`` levels: the message, its content array, a
    tool_result block, its content array, a text block, and ``levels - 5`` more levels of
    objects and arrays in the block's ``meta`` key."""
    value: Any = 1
    for n in range(levels - 5):
        value = {"a": value} if n % 2 else [value]
    block = {"type": "tool_result", "tool_use_id": "t", "content": [_text("x") | {"meta": value}]}
    return {"role": "user", "content": [block]}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def test_a_message_nested_as_deeply_as_allowed_is_stored_and_read_back() -> None:
    """A message nesting MAX_MESSAGE_NESTING levels converts, is stored inside a compaction
    (two levels more) and reads back equal, also read 500 frames deep in a program."""
    d = _deep_message(MAX_MESSAGE_NESTING)
    assert not nests_deeper(d, MAX_MESSAGE_NESTING)
    assert nests_deeper(d, MAX_MESSAGE_NESTING - 1)
    [message] = messages_from_dicts([d])
    with memory_checkpointer() as cp:
        cp.append("s", [Compaction(1, 1, 0, 0, replacement=(message,))])

        def read(frames: int) -> Any:
            return list(cp.read("s")) if frames == 0 else read(frames - 1)

        (stored,) = read(500)
    assert isinstance(stored.body, Compaction)
    assert [d] == messages_to_dicts(stored.body.replacement)


def test_a_message_nested_deeper_than_allowed_is_refused_whatever_the_stack() -> None:
    """One level more (or thousands more) is InvalidMessageError naming the message and the
    bound, at any depth of the caller's stack: what is accepted never depends on where."""

    def convert(d: dict[str, Any], frames: int) -> Any:
        return messages_from_dicts([d]) if frames == 0 else convert(d, frames - 1)

    for levels in (MAX_MESSAGE_NESTING + 1, 3000):
        for frames in (0, 600):
            with pytest.raises(InvalidMessageError) as info:
                convert(_deep_message(levels), frames)
            assert f"message 0: nested more than {MAX_MESSAGE_NESTING} levels" in str(info.value)
