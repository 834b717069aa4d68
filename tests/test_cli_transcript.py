"""``lite-agent import`` and ``lite-agent export`` in real processes: a transcript comes back as
it went in (what a session cannot keep is refused naming the line, never lost quietly), the
JSON Lines are read and written exactly, and the export of sessions the agent wrote (stopped
turns, background notices, compactions, archived results) is the whole conversation."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _cli_runner import Cli, CliServer
from hypothesis import HealthCheck, assume, given, settings
from test_interchange import as_json, transcripts

from liteagent.eventlog import file_checkpointer, messages_from_dicts
from liteagent.eventlog.types import (
    AssistantMessage,
    Compaction,
    ContentArchived,
    Event,
    RawBlock,
    SessionStarted,
    TextBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    TranscriptImported,
    TurnAborted,
    UserPrompt,
)
from liteagent.sdk._cli_transcript import event_digest

pytestmark = pytest.mark.processes


def _jsonl(messages: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(m) + "\n" for m in messages)


def _exported(cli: Cli, sid: str) -> list[Any]:
    return [json.loads(line) for line in cli.ok("export", sid).out.split("\n") if line]


def _user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def _assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _result(tool_use_id: str, content: str = "ok") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}


_CALL = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}


# -- the round trip ------------------------------------------------------------------------------


def _tool_block_unstorable(ds: list[dict[str, Any]]) -> bool:
    """Whether a tool_use or tool_result block of ``ds`` holds a value the log cannot store in
    it (import refuses those: they would no longer be a tool call or result)."""
    return any(
        type(b) is RawBlock and b.data.get("type") in ("tool_use", "tool_result")
        for m in messages_from_dicts(ds)
        for b in m.content
    )


def _results_after_user(ds: list[dict[str, Any]]) -> bool:
    return any(
        a["role"] == b["role"] == "user"
        and isinstance(b["content"], list)
        and any(x["type"] == "tool_result" for x in b["content"])
        for a, b in itertools.pairwise(ds)
    )


@pytest.fixture(scope="module")
def module_cli(server: CliServer, tmp_path_factory: pytest.TempPathFactory) -> Cli:
    """One CLI workspace for the generated transcripts (each gets a session of its own)."""
    return Cli(server, tmp_path_factory.mktemp("transcripts"))


_SESSIONS: Iterator[int] = itertools.count()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ds=transcripts)
def test_import_then_export_gives_any_transcript_back(
    module_cli: Cli, ds: list[dict[str, Any]]
) -> None:
    """Any valid transcript a session can keep, imported and exported by real processes, comes
    back line by line: every block and value exact (lone surrogates, integers beyond 64 bits),
    a message's other keys kept, a string content as a string, consecutive messages of one
    role apart."""
    assume(ds and not _results_after_user(ds) and not _tool_block_unstorable(ds))
    sid = f"t{next(_SESSIONS)}"
    module_cli.ok("import", "-", "--session", sid, stdin=_jsonl(ds))
    assert as_json(ds) == as_json(_exported(module_cli, sid))


def test_consecutive_messages_of_one_role_come_back_apart(cli: Cli) -> None:
    """Two prompts in a row and two answers in a row are four messages after import/export."""
    ds = [
        _user(_text("a")),
        _user(_text("b")),
        _assistant(_text("c")),
        _assistant(_text("d")),
        _user(_text("e"), {"type": "image", "source": {"type": "url", "url": "u"}}),
    ]
    cli.ok("import", "-", "--session", "s", stdin=_jsonl(ds))
    assert ds == _exported(cli, "s")


def test_tool_results_and_text_of_one_message_stay_one_message(cli: Cli) -> None:
    """A user message of two tool results and a text is one message after import/export,
    and the text after the results is not a checkpoint."""
    ds = [
        _user(_text("go")),
        _assistant({**_CALL, "id": "t1"}, {**_CALL, "id": "t2"}),
        _user(_result("t1"), _result("t2", "no"), _text("note")),
        _user(_text("next prompt")),
    ]
    imported = cli.ok("import", "-", "--session", "s", "--json", stdin=_jsonl(ds)).json()
    assert (ds, 2) == (_exported(cli, "s"), imported["checkpoints"])


def test_a_string_content_and_other_keys_come_back_but_are_not_sent_to_the_model(
    cli: Cli,
) -> None:
    """A string content and a message's other keys come back as they were written; the
    conversation (what the model is sent) has the text block and no other keys, also after the
    session went on."""
    ds = [
        {"role": "user", "content": "hi", "id": "m1", "meta": {"n": [1, 2.5, None]}},
        {"role": "assistant", "content": [_CALL], "usage": {}},
        {"role": "user", "content": [_result("toolu_1"), _text("and")], "x": True},
        {"role": "assistant", "content": "done"},
    ]
    cli.ok("import", "-", "--session", "s", stdin=_jsonl(ds))
    assert ds == _exported(cli, "s")
    cli.ok("run", "more", "--session", "s", provider=cli.script({"text": "ok"}))
    exported = _exported(cli, "s")
    assert ds == exported[:4]
    assert [_user(_text("more")), _assistant(_text("ok"))] == exported[4:]
    view = cli.ok("replay", "s", "--view", "--json").json()["messages"]
    assert {"role", "content"} == {k for m in view for k in m}
    assert [_text("hi")] == view[0]["content"]
    assert [_text("done")] == view[3]["content"]


def test_tool_blocks_holding_what_a_session_cannot_store_are_refused_naming_the_line(
    cli: Cli,
) -> None:
    """A tool_use or tool_result block holding a value the log cannot store in it (it would
    be kept only as an opaque block: no longer a tool call or result) is refused, naming the
    line; so is a number JSON has no float for. Nothing is written."""
    big = 2**64
    for ds, line, what in [
        ([_user(_text("a")), _assistant({**_CALL, "n": big})], 2, "content[0] (tool_use)"),
        (
            [_user(_text("a")), _assistant(_CALL), _user({**_result("toolu_1"), "n": big})],
            3,
            "content[0] (tool_result)",
        ),
    ]:
        result = cli("import", "-", "--session", "s", stdin=_jsonl(ds))
        assert 1 == result.code
        assert f"lite-agent: line {line}: {what} holds an integer beyond 64 bits" in result.err
    result = cli("import", "-", "--session", "s", stdin='{"role": "user", "content": [1e400]}\n')
    assert 1 == result.code
    assert "line 1: not JSON (the number 1e400 is too large for a float)" in result.err
    for tiny in ("1e-400", "-2.5E-999", "0.0000001e-330"):
        text = f'{{"role": "user", "content": "a", "x": {tiny}}}\n'
        result = cli("import", "-", "--session", "s", stdin=text)
        assert 1 == result.code
        assert f"line 1: not JSON (the number {tiny} is too small for a float" in result.err
    assert [] == cli.ok("sessions", "--json").json()
    text = '{"role": "user", "content": "a", "x": [0e-400, 0.0, 5e-324, -0.0]}\n'
    cli.ok("import", "-", "--session", "s", stdin=text)
    assert '"x": [0.0, 0.0, 5e-324, -0.0]' in cli.ok("export", "s").out


def test_tool_results_right_after_a_user_message_are_refused_naming_both_lines(cli: Cli) -> None:
    """A user message with tool results after another user message would be joined to it by
    the log: refused naming both lines, nothing written."""
    ds = [
        _user(_text("go")),
        _assistant(_CALL),
        _user(_result("toolu_1")),
        _user(_result("toolu_1")),
    ]
    result = cli("import", "-", "--session", "s", stdin=_jsonl(ds))
    assert 1 == result.code
    assert (
        "lite-agent: line 4: a user message with tool results right after the user "
        "message of line 3"
    ) in result.err
    assert [] == cli.ok("sessions", "--json").json()


# -- JSON Lines, read and written exactly --------------------------------------------------------


def test_lines_are_split_at_newlines_only(cli: Cli) -> None:
    """Characters str.splitlines splits at (U+2028, U+0085, U+001E), written raw inside a JSON
    string, stay in the string; a CRLF file and a byte-order mark are read too."""
    ds = [_user(_text("a\u2028b\x85c")), _assistant(_text("\u001e\u2029"))]
    text = "\ufeff" + "".join(json.dumps(d, ensure_ascii=False) + "\r\n" for d in ds)
    cli.ok("import", "-", "--session", "s", stdin=text)
    assert ds == _exported(cli, "s")


def test_export_writes_lone_surrogates_as_json_escapes(cli: Cli) -> None:
    """A lone surrogate (UTF-8 cannot carry it) is exported as its JSON escape, exit 0, in the
    lines and in --json."""
    ds = [_user(_text("a\ud800")), _assistant({**_CALL, "input": {"k\udfff": 2**70}})]
    cli.ok("import", "-", "--session", "s", stdin=_jsonl(ds))
    out = cli.ok("export", "s").out
    assert ('"a\\ud800"' in out, ds) == (True, [json.loads(x) for x in out.splitlines()])
    assert ds == cli.ok("export", "s", "--json").json()["messages"]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (
            '{"role": "user", "content": [{"type": "text", "text": "a", "n": NaN}]}',
            "not JSON (NaN is not JSON)",
        ),
        (
            '{"role": "user", "content": "a", "content": "b"}',
            "not JSON (the key 'content' appears twice in one object)",
        ),
        ("[" * 100_000 + "]" * 100_000, "not JSON (nested too deeply)"),
    ],
    ids=["nan", "duplicate-key", "deep"],
)
def test_what_json_lines_cannot_hold_exactly_is_refused(cli: Cli, line: str, why: str) -> None:
    """NaN, a key given twice and absurd nesting are refused naming the line; nothing is
    written and there is no traceback."""
    result = cli(
        "import", "-", "--session", "s", stdin=f'{{"role": "user", "content": "x"}}\n{line}\n'
    )
    assert (1, f"lite-agent: line 2: {why}\n") == (result.code, result.err.splitlines(True)[0])
    assert [] == cli.ok("sessions", "--json").json()


# -- the export of sessions the agent wrote ------------------------------------------------------


def _write(cli: Cli, sid: str, events: list[Event]) -> None:
    with file_checkpointer(workdir=cli.work, home=cli.home) as cp:
        cp.append(sid, [SessionStarted(workdir=str(cli.work), model="m"), *events])


def test_export_gives_a_stopped_turn_and_a_background_notice_as_messages_of_their_own(
    cli: Cli,
) -> None:
    """The notice closing a stopped turn is an assistant message after the interrupted
    results; a background notice and the next prompt are two user messages."""
    _write(
        cli,
        "s",
        [
            UserPrompt(content=(TextBlock("go"),)),
            AssistantMessage(content=(ToolUseBlock("t1", "bash", {}),)),
            ToolResult(block=ToolResultBlock("t1", "interrupted", is_error=True)),
            TurnAborted(reason="cancelled", notice="[the turn was stopped]"),
            UserPrompt(content=(TextBlock("task 1 done"),), origin="background"),
            UserPrompt(content=(TextBlock("next"),)),
        ],
    )
    assert [
        _user(_text("go")),
        _assistant({**_CALL, "id": "t1", "input": {}}),
        _user({**_result("t1", "interrupted"), "is_error": True}),
        _assistant(_text("[the turn was stopped]")),
        _user(_text("task 1 done")),
        _user(_text("next")),
    ] == _exported(cli, "s")


def test_export_gives_the_whole_history_of_a_compacted_session_with_archived_results(
    cli: Cli,
) -> None:
    """Compactions are not applied and an archived result is written in full: export is the
    log's conversation, not the model's last view."""
    big = "x" * 20_000
    _write(
        cli,
        "s",
        [
            UserPrompt(content=(TextBlock("go"),)),
            AssistantMessage(content=(ToolUseBlock("t1", "bash", {}),)),
            ToolResult(block=ToolResultBlock("t1", big)),
            ContentArchived(tool_use_id="t1", ref="sha256-" + "0" * 64, chars=20_000, size=20_000),
            AssistantMessage(content=(TextBlock("done"),)),
            Compaction(
                first_seq=2, last_seq=6, tokens_before=9000, tokens_after=10, replacement=()
            ),
        ],
    )
    assert [
        _user(_text("go")),
        _assistant({**_CALL, "id": "t1", "input": {}}),
        _user(_result("t1", big)),
        _assistant(_text("done")),
    ] == _exported(cli, "s")


def test_an_exported_session_imports_as_an_equal_conversation(cli: Cli, tmp_path: Path) -> None:
    """export, import, export: the same lines."""
    ds = [
        _user(_text("go")),
        _assistant(_CALL),
        _user(_result("toolu_1"), _text("r")),
        _assistant(_text("a")),
        _assistant(_text("b")),
    ]
    cli.ok("import", "-", "--session", "one", stdin=_jsonl(ds))
    first = cli.ok("export", "one").out
    (tmp_path / "t.jsonl").write_text(first, encoding="utf-8")
    cli.ok("import", str(tmp_path / "t.jsonl"), "--session", "two")
    assert first == cli.ok("export", "two").out


def test_what_json_cannot_carry_in_a_log_is_written_as_json_or_refused(cli: Cli) -> None:
    """A log written by hand can hold a NaN in a tool input, an imported one a lone surrogate
    in a text: ``replay --json`` prints strict JSON (NaN as the string "NaN"), the surrogate
    comes back escaped; the request view prints it as "NaN" too; the export (which must come
    back as it was) refuses the NaN, naming the message (a strict JSON document with --json),
    rather than write what no JSON reader takes."""
    _write(
        cli,
        "s",
        [
            UserPrompt(content=(TextBlock("hi"),)),
            AssistantMessage(content=(ToolUseBlock("t1", "bash", {"x": float("nan")}),)),
        ],
    )
    lone = '{"role": "user", "content": [{"type": "text", "text": "lone \\ud800"}]}\n'
    cli.ok("import", "-", "--session", "lone", stdin=lone)

    def strict(text: str) -> Any:
        def refuse(name: str) -> Any:
            raise AssertionError(f"{name} in the output")

        return json.loads(text, parse_constant=refuse)

    events = strict(cli.ok("replay", "s", "--json").out)
    assert "NaN" in json.dumps(events)
    view = strict(cli.ok("replay", "s", "--view", "--json").out)
    assert {"x": "NaN"} == view["messages"][1]["content"][0]["input"]
    refused = cli("export", "s", "--json")
    assert 1 == refused.code
    assert "not JSON data (the number nan)" in strict(refused.out)["error"]["message"]
    view = strict(cli.ok("replay", "lone", "--view", "--json").out)
    assert [_text("lone \ud800")] == view["messages"][0]["content"]
    assert [{"role": "user", "content": [_text("lone \ud800")]}] == _exported(cli, "lone")
    result = cli("export", "s")
    assert 1 == result.code
    assert "lite-agent: message 2 content[0]: not JSON data (the number nan)\n" == result.err


def test_export_names_a_message_whose_other_keys_hold_a_nan(cli: Cli) -> None:
    """A log written by hand whose TranscriptImported record gives a message a key holding
    NaN: export refuses, naming the message itself (not one of its blocks)."""
    prompt = UserPrompt(content=(TextBlock("hi"),))
    _write(
        cli,
        "s",
        [
            TranscriptImported(
                shapes=((3, {"weight": float("nan")}, False),),
                digests=((3, event_digest(prompt)),),
            ),
            prompt,
        ],
    )
    result = cli("export", "s")
    assert 1 == result.code
    assert "lite-agent: message 1: not JSON data (the number nan)\n" == result.err


def test_a_restore_or_fork_keeps_how_the_messages_before_it_were_written(cli: Cli) -> None:
    """An imported session whose messages have other keys and string contents, restored (or
    forked) to its second checkpoint: the messages before it export as they were imported; a
    new turn written where the later ones were gets no shape of theirs; an undo of the restore
    gives the whole transcript back."""
    ds = [
        {"role": "user", "content": "first", "id": "m1"},
        {"role": "assistant", "content": "one", "id": "m2"},
        {"role": "user", "content": [_text("second")], "id": "m3"},
        {"role": "assistant", "content": [_text("two")], "id": "m4"},
    ]
    cli.ok("import", "-", "--session", "imp", stdin=_jsonl(ds))
    checkpoints = cli.ok("checkpoints", "imp", "--json").json()
    second = checkpoints[-1]["seq"]
    forked = cli.ok("fork", "imp", str(second), "--json").json()["session_id"]
    assert ds[:2] == _exported(cli, forked)
    cli.ok("restore", "imp", str(second), "--conversation-only")
    assert ds[:2] == _exported(cli, "imp")
    cli.ok("restore", "--undo", "imp")
    assert ds == _exported(cli, "imp")
    cli.ok("restore", "imp", str(second), "--conversation-only")
    cli.ok("run", "again", "--session", "imp", provider=cli.script({"text": "new"}))
    after = _exported(cli, "imp")
    assert ds[:2] == after[:2]
    assert all("id" not in d for d in after[2:]), after
    assert [_text("again")] == after[2]["content"]
