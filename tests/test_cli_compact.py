"""``lite-agent compact`` and ``replay`` in real processes: a compaction with instructions
summarizes with them when a model is available and says why not otherwise; its progress never
goes back; replay shows every event kind (context_status with its level and numbers), says
when there is nothing to verify and fails a record it cannot check; no escape code reaches
output that is not a terminal."""

from __future__ import annotations

import json
import re
import typing

import msgspec
import pytest
from _cli_runner import Cli, clean_env, two_prompts, write

from liteagent.context._replay import NO_DIGEST
from liteagent.eventlog import StoredEvent, file_checkpointer
from liteagent.eventlog.types import (
    AssistantMessage,
    BackgroundCompleted,
    BackgroundStarted,
    BranchCreated,
    Compaction,
    ContentArchived,
    ContextStatus,
    Event,
    FileSnapshot,
    Forked,
    ModelRequestRecord,
    OpaqueEvent,
    RestoreFile,
    RestoreFinished,
    RestoreStarted,
    SessionStarted,
    TextBlock,
    ToolResult,
    ToolResultBlock,
    TranscriptImported,
    TurnAborted,
    UserPrompt,
)
from liteagent.providers.testing import FakeMessagesServer, message, text
from liteagent.sdk._cli_replay import describe_event

pytestmark = pytest.mark.processes

_INSTRUCTIONS = "keep the API decisions"


def claude(fake: FakeMessagesServer) -> dict[str, str]:
    """The environment of a CLI that talks to Claude through the fake server."""
    return clean_env(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=fake.base_url)


def test_compact_with_instructions_summarizes_with_them(cli: Cli) -> None:
    """With a model (Claude, over the real client): the summary request carries the
    instructions, the recorded compaction holds the summary, the CLI says so, and every request
    of the session still recomputes from the log."""
    two_prompts(cli)
    with FakeMessagesServer() as fake:
        fake.add(message([text("SUMMARY: the API decisions so far")]))
        result = cli("compact", "s1", _INSTRUCTIONS, "--json", env=claude(fake))
        assert 0 == result.code, result
        [request] = fake.requests
    assert _INSTRUCTIONS in json.dumps(request.body)
    outcome = result.json()
    assert {
        "changed": True,
        "summarized": True,
        "instructions_used": True,
        "note": None,
    }.items() <= outcome.items()
    [compaction] = [e.body for e in cli.events("s1") if isinstance(e.body, Compaction)]
    assert _INSTRUCTIONS == compaction.instructions
    texts = [b.text for m in compaction.replacement for b in m.content if isinstance(b, TextBlock)]
    assert any("SUMMARY: the API decisions so far" in t for t in texts)
    assert cli.ok("replay", "s1", "--verify", "--json").json()["ok"] is True


def test_compact_says_it_summarized(cli: Cli) -> None:
    """The human form: the compaction line says the model wrote a summary; no note."""
    two_prompts(cli)
    out = cli.ok("compact", "s1", _INSTRUCTIONS, provider=cli.script({"text": "SUMMARY: kept"})).out
    assert "compacted with a summary by the model: ~" in out
    assert "note:" not in out


def test_compact_without_a_model_says_the_instructions_were_not_used(cli: Cli) -> None:
    """No API key and no --provider: the compaction is mechanical and the CLI says that the
    instructions were not used and why (exit 0: the compaction itself worked)."""
    two_prompts(cli)
    result = cli.ok("compact", "s1", _INSTRUCTIONS)
    assert (
        "note: the instructions were not used: no model to summarize with (set "
        "ANTHROPIC_API_KEY, or pass --provider)"
    ) in result.out
    outcome = cli.ok("compact", "s1", _INSTRUCTIONS, "--json").json()
    assert outcome["summarized"] is False
    assert outcome["instructions_used"] is False
    assert outcome["note"].startswith("the instructions were not used: no model")


def test_compact_with_nothing_to_summarize_says_so(cli: Cli) -> None:
    """A model, but a conversation no longer than the turns a summary keeps: nothing is sent
    to the model, and the CLI says that the instructions were not used and why."""
    cli.ok("run", "hi", "--session", "s1", provider=cli.script({"text": "Hello."}))
    outcome = cli.ok(
        "compact", "s1", _INSTRUCTIONS, "--json", provider=cli.script({"text": "never asked"})
    ).json()
    assert outcome["instructions_used"] is False
    assert outcome["note"].startswith(
        "the instructions were not used: there is nothing old enough to summarize"
    )


def test_compact_after_a_failed_summary_says_why(cli: Cli) -> None:
    """The model fails: the compaction goes on without a summary, and the CLI says that the
    instructions were not used because the summary failed."""
    two_prompts(cli)
    outcome = cli.ok(
        "compact",
        "s1",
        _INSTRUCTIONS,
        "--json",
        provider=cli.script({"error": "overloaded", "message": "busy now"}),
    ).json()
    assert outcome["instructions_used"] is False
    assert outcome["note"].startswith(
        "the instructions were not used: the summary failed (busy now)"
    )


def test_a_failed_summary_still_reduces_as_without_a_model(cli: Cli) -> None:
    """The model fails: the compaction drops the older turns just as one without a model does
    (the same tokens after), and the note says it was mechanical."""
    transcript = "".join(
        json.dumps({"role": role, "content": f"{role} {i} " + "words " * 200}) + "\n"
        for i in range(20)
        for role in ("user", "assistant")
    )
    for sid in ("failed", "no-model"):
        cli.ok("import", "-", "--session", sid, stdin=transcript)
    failed = cli.ok("compact", "failed", _INSTRUCTIONS, "--json", provider=cli.script()).json()
    mechanical = cli.ok("compact", "no-model", _INSTRUCTIONS, "--json").json()
    assert (True, mechanical["before"], mechanical["after"]) == (
        failed["changed"],
        failed["before"],
        failed["after"],
    )
    assert mechanical["after"] < mechanical["before"] // 3
    assert failed["note"].endswith("so the compaction was mechanical, as without a model")


def test_compaction_progress_never_goes_back(cli: Cli) -> None:
    """Off a terminal, each compaction step is a line with its percentage: the percentages
    never go down, the last is 100 %, and the persisting stage is there."""
    for i in range(4):
        cli.ok(
            "run",
            f"step {i}",
            "--session",
            "s1",
            provider=cli.script(write(f"f{i}.txt", "x" * 200), {"text": f"Done {i}."}),
        )
    out = cli.ok("compact", "s1").out
    steps = re.findall(r"^  compact(?:ing|ion done) (\w+) (\d+)%", out, flags=re.MULTILINE)
    percents = [int(p) for _, p in steps]
    assert percents, out
    assert sorted(percents) == percents
    assert 100 == percents[-1]
    assert "persist" in [stage for stage, _ in steps]


def test_replay_shows_context_status_level_and_numbers(cli: Cli) -> None:
    """Each context_status row names its level, tokens before and after, and the budget."""
    two_prompts(cli)
    events = cli.ok("replay", "s1", "--json").json()
    rows = cli.ok("replay", "s1").out.splitlines()
    statuses = [
        (e, row) for e, row in zip(events, rows, strict=True) if e["kind"] == "context_status"
    ]
    assert statuses
    for event, row in statuses:
        body = event["body"]
        assert row.endswith(
            f"context_status       level {body['level']}: ~{body['tokens']} → "
            f"~{body['tokens_after']} tokens of {body['budget']}"
        )


def test_replay_verify_with_no_recorded_requests_says_so(cli: Cli) -> None:
    """A session whose log holds no model request (an imported transcript): --verify says
    there was nothing to verify, exit 0; --json says so too."""
    transcript = "\n".join(
        json.dumps(m)
        for m in ({"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"})
    )
    cli.ok("import", "-", "--session", "imp", stdin=transcript)
    out = cli.ok("replay", "imp", "--verify").out
    assert (
        "nothing to verify: session imp has no recorded model requests (no turn of it has "
        "called the model)\n"
    ) == out
    report = cli.ok("replay", "imp", "--verify", "--json").json()
    assert {"ok": True, "requests": 0, "nothing_to_verify": True}.items() <= report.items()


def test_replay_verify_fails_a_record_without_a_request_digest(cli: Cli) -> None:
    """A model_request record holding no request digest cannot be checked: --verify and --view
    report it as not matching, with the reason, and exit 1."""
    with file_checkpointer(workdir=cli.work, home=cli.home) as cp:
        cp.append(
            "bare",
            [
                SessionStarted(workdir=str(cli.work), model="m"),
                UserPrompt(content=(TextBlock("hi"),)),
                ModelRequestRecord(view_hash="ab" * 32, token_estimate=42),
                AssistantMessage(content=(TextBlock("hello"),), stop_reason="end_turn"),
            ],
        )
    report = cli("replay", "bare", "--verify", "--json")
    human = cli("replay", "bare", "--verify")
    view = cli("replay", "bare", "--view", "--at", "3", "--json")
    view_human = cli("replay", "bare", "--view", "--at", "3")
    assert (1, False, [(3, "", NO_DIGEST)]) == (
        report.code,
        report.json()["ok"],
        [(m["seq"], m["computed"], m["problem"]) for m in report.json()["mismatches"]],
    )
    assert (1, True, True) == (human.code, "MISMATCH" in human.out, NO_DIGEST in human.out)
    assert (1, False, NO_DIGEST) == (view.code, view.json()["matches"], view.json()["problem"])
    assert (1, True) == (view_human.code, NO_DIGEST in " ".join(view_human.out.split()))


_SAMPLES: list[Event | OpaqueEvent] = [
    SessionStarted(workdir="/w", model="m"),
    UserPrompt(content=(TextBlock("hi"),)),
    AssistantMessage(content=(TextBlock("hello"),), stop_reason="end_turn"),
    ToolResult(block=ToolResultBlock("t1", "ok"), tool_name="bash"),
    FileSnapshot(
        path="a.txt", tool_call_id="t1", pre_image=None, pre_hash=None, post_hash="0" * 64
    ),
    Compaction(first_seq=1, last_seq=4, tokens_before=100, tokens_after=10),
    ContextStatus(level="select", tokens=500, budget=400, tokens_after=380, actions=("archive",)),
    ModelRequestRecord(view_hash="ab" * 32, token_estimate=42),
    BackgroundStarted(task_id="bg1", tool_call_id="t1", description="make", pid=7, host="h"),
    BackgroundCompleted(task_id="bg1", ok=False, summary="exit 1"),
    TurnAborted(reason="interrupted"),
    RestoreStarted(
        to_seq=2,
        conversation=True,
        files=(
            RestoreFile(path="a.txt", target=None, target_hash=None, backup=None, backup_hash=None),
        ),
    ),
    RestoreFinished(started_seq=5, outcome="completed"),
    ContentArchived(tool_use_id="t1", ref="blob:abc", chars=10, size=10),
    BranchCreated(origin="s1", at_seq=3),
    Forked(origin="s1", at_seq=3),
    TranscriptImported(shapes=((2, {"id": "m1"}, True),)),
    OpaqueEvent(kind="from_the_future", data=b"\x01\x02"),
]


def test_replay_describes_every_event_kind() -> None:
    """Every kind of event (and one of an unknown kind) gets a line of its own in replay: the
    samples cover the whole event vocabulary, so a new kind without a description fails."""
    assert set(typing.get_args(Event)) | {OpaqueEvent} == {type(e) for e in _SAMPLES}
    lines = {type(e).__name__: describe_event(StoredEvent(1, 0.0, "k", e)) for e in _SAMPLES}
    assert all(lines.values()), lines
    assert "level select: ~500 → ~380 tokens of 400; archive" == lines["ContextStatus"]
    assert "background task bg1 started by t1 (pid 7 on h): make" == lines["BackgroundStarted"]


def test_nothing_off_a_terminal_holds_an_escape_code(cli: Cli) -> None:
    """With stdout and stderr files (not terminals), even with TERM set to a colour terminal,
    the commands write plain text: not one escape code."""
    env = clean_env(TERM="xterm-256color")
    two_prompts(cli)
    results = [
        cli(
            "run",
            "more",
            "--session",
            "s1",
            env=env,
            provider=cli.script({"text": "\x1b[31mred\x1b[0m from the model"}),
        ),
        cli("checkpoints", "s1", env=env),
        cli("sessions", env=env),
        cli("restore", "s1", "2", env=env),
        cli("compact", "s1", "x", env=env),
        cli("replay", "s1", env=env),
        cli("replay", "s1", "--view", env=env),
        cli("replay", "s1", "--verify", env=env),
        cli("doctor", env=env),
        cli("restore", "s1", "999", env=env),
        cli(env=env),
    ]
    for result in results:
        assert "\x1b" not in result.out + result.err, result
    assert "^[[31mred^[[0m from the model" in results[0].out


def test_json_run_prints_only_its_document(cli: Cli) -> None:
    """run --json with text and a tool call: stdout is the one JSON document and nothing else
    (the streamed text and the tool line are not printed)."""
    result = cli.ok(
        "run",
        "go",
        "--json",
        provider=cli.script(
            {"tool": "write_file", "input": {"path": "a.txt", "content": "x"}, "text": "Writing."},
            {"text": "Done."},
        ),
    )
    document = msgspec.json.decode(result.out)
    assert "Done." == document["text"]
    assert "" == result.err


def test_logs_off_a_terminal_are_json_lines_without_escape_codes(cli: Cli) -> None:
    """With LITE_AGENT_LOG_LEVEL=DEBUG and stderr a file: every log line is a JSON object (no
    colour codes), and stdout still holds only the command's output."""
    result = cli(
        "run",
        "hi",
        "--session",
        "s1",
        provider=cli.script({"text": "Hello."}),
        env=clean_env(LITE_AGENT_LOG_LEVEL="DEBUG", TERM="xterm-256color"),
    )
    assert 0 == result.code, result
    lines = result.err.splitlines()
    assert lines
    assert all("level" in json.loads(line) for line in lines)
    assert "\x1b" not in result.err
    assert result.out.startswith("Hello.\n")


def test_a_bad_log_level_is_a_usage_error(cli: Cli) -> None:
    """LITE_AGENT_LOG_LEVEL=LOUD: exit 2 and one line naming the variable."""
    result = cli("sessions", env=clean_env(LITE_AGENT_LOG_LEVEL="loud"))
    assert 2 == result.code
    assert "lite-agent: LITE_AGENT_LOG_LEVEL=LOUD: not a log level\n" == result.err


def test_blank_instructions_count_as_none(cli: Cli) -> None:
    """`compact ID " "` without a model compacts as without instructions: no note that they
    were not used (it said so, although there were none to use)."""
    two_prompts(cli)
    result = cli.ok("compact", "s1", "  \t")
    assert "note:" not in result.out
    outcome = cli.ok("compact", "s1", " ", "--json").json()
    assert (None, None) == (outcome["note"], outcome["instructions_used"])
