"""The scriptable ``lite-agent`` subcommands, each run in a real process against a temporary
home: their output (human and ``--json``), exit codes, and what they did to files and logs."""

from __future__ import annotations

import json
import subprocess

import msgspec
import pytest
from _cli_runner import LITE_AGENT, Cli, CliServer, clean_env, two_prompts, write

from liteagent.eventlog import file_checkpointer, fold
from liteagent.eventlog.types import AssistantMessage, Message, TextBlock
from liteagent.providers import scripted
from liteagent.providers._contract import ModelRequest
from liteagent.providers.testing import FakeMessagesServer, message, text
from liteagent.sdk import create_agent
from liteagent.sdk._prompt import DEFAULT_SYSTEM_PROMPT
from liteagent.tools import default_tools

pytestmark = pytest.mark.processes


def test_usage_errors_exit_2_and_help_exits_0(server: CliServer) -> None:
    """The installed script: a usage error exits 2 with argparse's message; --help exits 0
    and documents the script format."""
    bad = subprocess.run(
        [str(LITE_AGENT), "restore", "only-an-id"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert 2 == bad.returncode
    assert "the following arguments are required: SEQ" in bad.stderr
    helped = server.run("--help")
    assert 0 == helped.code
    assert "scripted:FILE" in helped.out


def test_run_streams_text_and_tool_calls_and_edits_real_files(cli: Cli) -> None:
    """run: the model's text and one line per tool call; the tool really wrote the file."""
    result = cli.ok(
        "run",
        "make hello",
        provider=cli.script(
            write("hello.py", "print('hi')\n", say="Writing it."), {"text": "Created hello.py."}
        ),
    )
    assert "Writing it.\n  → write_file hello.py\nCreated hello.py.\n" in result.out
    assert "print('hi')\n" == (cli.work / "hello.py").read_text()
    assert "[session " in result.out


def test_run_json_and_continuing_a_session(cli: Cli) -> None:
    """run --json prints the result; --session continues the same log."""
    first = cli.ok(
        "run", "hi", "--session", "s1", "--json", provider=cli.script({"text": "Hello."})
    ).json()
    assert {
        "session_id": "s1",
        "text": "Hello.",
        "stop_reason": "end_turn",
    }.items() <= first.items()
    cli.ok("run", "again", "--session", "s1", provider=cli.script({"text": "Again."}))
    prompts = [e.body.text for e in cli.events("s1") if e.kind == "user_prompt"]
    assert ["hi", "again"] == prompts


def test_sessions_and_checkpoints(cli: Cli) -> None:
    """sessions lists ids newest first; checkpoints lists one per prompt with its files."""
    two_prompts(cli, "older")
    cli.ok("run", "x", "--session", "newer", provider=cli.script({"text": "ok"}))
    sessions = cli.ok("sessions", "--json").json()
    assert ["newer", "older"] == [s["id"] for s in sessions]
    checkpoints = cli.ok("checkpoints", "older", "--json").json()
    assert ["write one", "write two"] == [c["prompt"] for c in checkpoints]
    assert ["a.txt"] == checkpoints[1]["files"]
    human = cli.ok("checkpoints", "older").out.splitlines()
    assert ["seq", "time", "prompt", "effects", "files"] == human[0].split()
    assert human[2].endswith("write two  -        a.txt")


def test_restore_puts_the_files_and_the_conversation_back(cli: Cli) -> None:
    """restore ID SEQ: the file as before that prompt, the log truncated, progress shown."""
    two_prompts(cli)
    seq = cli.ok("checkpoints", "s1", "--json").json()[1]["seq"]
    result = cli.ok("restore", "s1", str(seq))
    assert "  restoring 1/1 files 100%\n  restore done: 1 files put back 100%\n" in result.out
    assert "one\n" == (cli.work / "a.txt").read_text()
    assert seq - 1 == cli.events("s1")[-1].seq
    assert ["write one"] == [c["prompt"] for c in cli.ok("checkpoints", "s1", "--json").json()]


def test_restore_conversation_only_leaves_the_files(cli: Cli) -> None:
    """--conversation-only truncates the log and touches no file."""
    two_prompts(cli)
    seq = cli.ok("checkpoints", "s1", "--json").json()[1]["seq"]
    result = cli.ok("restore", "s1", str(seq), "--conversation-only", "--json").json()
    assert {"restored_files": [], "conversation_restored": True}.items() <= result.items()
    assert "two\n" == (cli.work / "a.txt").read_text()
    assert seq - 1 == cli.events("s1")[-1].seq


def test_a_refused_restore_names_the_file_and_changes_nothing(cli: Cli) -> None:
    """A file the user changed since makes restore exit 1 with one line naming it and why."""
    two_prompts(cli)
    (cli.work / "a.txt").write_text("mine\n")
    head = cli.events("s1")[-1].seq
    seq = cli.ok("checkpoints", "s1", "--json").json()[0]["seq"]
    result = cli("restore", "s1", str(seq))
    assert 1 == result.code
    [line] = result.err.splitlines()
    assert line.startswith("lite-agent: restore refused, nothing was changed: a.txt: ")
    assert "mine\n" == (cli.work / "a.txt").read_text()
    assert head == cli.events("s1")[-1].seq


def test_compact_records_a_compaction_and_replay_still_verifies(cli: Cli) -> None:
    """compact --json: a compaction event; later requests use it and --verify recomputes every
    request (before and after the compaction) exactly."""
    for i in range(4):
        cli.ok(
            "run",
            f"step {i}",
            "--session",
            "s1",
            provider=cli.script(write(f"f{i}.txt", "x" * 200), {"text": f"Done {i}."}),
        )
    stats = cli.ok("compact", "s1", "--json").json()
    assert stats["changed"] is True
    assert stats["after"] < stats["before"]
    cli.ok("run", "after", "--session", "s1", provider=cli.script({"text": "ok"}))
    kinds = [e.kind for e in cli.events("s1")]
    assert "compaction" in kinds
    verified = cli.ok("replay", "s1", "--verify", "--json").json()
    assert {"ok": True, "requests": 9, "mismatches": []}.items() <= verified.items()
    human = cli.ok("compact", "s1").out
    assert "compaction start" in human


def test_replay_events_view_and_verify(cli: Cli) -> None:
    """replay lists the events in order (--at stops early); --view --at a model request shows
    what the model saw and that its hash matches the record."""
    two_prompts(cli)
    events = cli.ok("replay", "s1", "--json").json()
    assert list(range(1, len(events) + 1)) == [e["seq"] for e in events]
    assert "session_started" == events[0]["kind"]
    requests = [e["seq"] for e in events if e["kind"] == "model_request"]
    assert 4 == len(requests)
    assert (
        requests[1] == cli.ok("replay", "s1", "--at", str(requests[1]), "--json").json()[-1]["seq"]
    )
    view = cli.ok("replay", "s1", "--view", "--at", str(requests[2]), "--json").json()
    assert view["matches"] is True
    assert view["recorded"] is True
    assert [{"type": "text", "text": "write one"}] == view["messages"][0]["content"]
    assert "write two" == view["messages"][-1]["content"][0]["text"]
    assert (
        "matches the recorded one" in cli.ok("replay", "s1", "--view", "--at", str(requests[2])).out
    )
    assert "4 of 4 recorded requests" in cli.ok("replay", "s1", "--verify").out


def test_replay_view_lists_the_tools_the_agent_sent(cli: Cli) -> None:
    """--view lists the tools the CLI's agent sends, the ``context`` reader included, and the
    request it shows (model, system prompt, tools, max_tokens) is the one recorded."""
    two_prompts(cli)
    events = cli.ok("replay", "s1", "--json").json()
    first = next(e["seq"] for e in events if e["kind"] == "model_request")
    view = cli.ok("replay", "s1", "--view", "--at", str(first), "--json").json()
    assert ([t.name for t in default_tools()] + ["context"], True, True) == (
        view["tools"],
        view["request_matches"],
        view["matches"],
    )
    human = cli.ok("replay", "s1", "--view", "--at", str(first)).out
    assert f"tools: {', '.join(view['tools'])}" in human


_OTHER_TOOLS = """
import liteagent.sdk._cli_replay as replay
from liteagent.sdk._prompt import DEFAULT_SYSTEM_PROMPT
from liteagent.sdk._replay import ViewConfig
from liteagent.tools import default_tools
config = ViewConfig.of_tools(default_tools())
replay.cli_view_config = lambda: ViewConfig(tools=config.tools, system=DEFAULT_SYSTEM_PROMPT)
"""


def test_replay_view_with_other_tools_does_not_match(cli: Cli) -> None:
    """A view computed with other tools than the recorded request's is no match: exit 1, and
    the CLI says which part differs."""
    two_prompts(cli)
    events = cli.ok("replay", "s1", "--json").json()
    first = str(next(e["seq"] for e in events if e["kind"] == "model_request"))
    result = cli("replay", "s1", "--view", "--at", first, "--json", prelude=_OTHER_TOOLS)
    assert (1, False, False) == (
        result.code,
        result.json()["request_matches"],
        result.json()["matches"],
    )
    human = cli("replay", "s1", "--view", "--at", first, prelude=_OTHER_TOOLS)
    assert 1 == human.code
    assert "the recorded request had another model, system prompt, tools or max_tokens" in human.out


class Inject:
    """Middleware that sends the model one more message than the log holds."""

    def before_model(self, request: ModelRequest, state: object) -> ModelRequest:
        extra = Message("user", (TextBlock("not in the log"),))
        return msgspec.structs.replace(request, messages=(*request.messages, extra))


def test_verify_reports_requests_that_differ_from_the_log(cli: Cli) -> None:
    """Requests whose messages a middleware changed do not recompute from the log: --verify
    names each one and exits 1."""
    with (
        file_checkpointer(workdir=cli.work, home=cli.home) as cp,
        create_agent(
            model=scripted([AssistantMessage(content=(TextBlock("hi"),))] * 2),
            model_name="m",
            tools=default_tools(),
            use=[Inject()],
            checkpointer=cp,
            workdir=cli.work,
            system_prompt=DEFAULT_SYSTEM_PROMPT,
        ) as agent,
    ):
        agent.send("hello", session_id="lib")
        agent.send("again", session_id="lib")
    result = cli("replay", "lib", "--verify", "--json")
    assert 1 == result.code
    assert [3, 6] == [m["seq"] for m in result.json()["mismatches"]]
    assert "0 of 2 recorded requests" in cli("replay", "lib", "--verify").out


def test_the_replay_provider_reruns_a_session(cli: Cli) -> None:
    """--provider replay:SESSION answers from a stored session; the same prompts give the
    same files and text in a new session."""
    two_prompts(cli)
    (cli.work / "a.txt").unlink()
    out = cli.ok("run", "write one", "--session", "again", "--json", provider="replay:s1").json()
    assert "Wrote one." == out["text"]
    assert "one\n" == (cli.work / "a.txt").read_text()
    wrong = cli("run", "something else", "--session", "third", provider="replay:s1")
    assert 1 == wrong.code
    assert "differs from the recording" in wrong.err


def test_export_and_import_round_trip(cli: Cli) -> None:
    """export prints JSON Lines in the Messages shape; import makes a session whose export is
    the same, with checkpoints, a view, and further turns like any other."""
    two_prompts(cli)
    exported = cli.ok("export", "s1").out
    lines = [json.loads(line) for line in exported.splitlines()]
    assert ["user", "assistant", "user", "assistant"] * 2 == [m["role"] for m in lines]
    imported = cli.ok("import", "-", "--session", "copy", "--json", stdin=exported).json()
    assert {"session_id": "copy", "messages": 8, "checkpoints": 2}.items() <= imported.items()
    assert exported == cli.ok("export", "copy").out
    checkpoints = cli.ok("checkpoints", "copy", "--json").json()
    assert ["write one", "write two"] == [c["prompt"] for c in checkpoints]
    view = cli.ok("replay", "copy", "--view", "--json").json()
    assert lines == view["messages"]
    cli.ok("run", "continue", "--session", "copy", provider=cli.script({"text": "Continued."}))
    cli.ok("restore", "copy", str(checkpoints[1]["seq"]), "--conversation-only")
    assert lines[:4] == [json.loads(x) for x in cli.ok("export", "copy").out.splitlines()]


def test_import_reports_bad_lines_and_writes_nothing(cli: Cli) -> None:
    """Every bad line is named with its number; exit 1; no session is created."""
    transcript = "\n".join(
        [
            json.dumps({"role": "user", "content": "hi"}),
            "{not json",
            json.dumps({"role": "robot", "content": []}),
        ]
    )
    result = cli("import", "-", "--session", "bad", stdin=transcript)
    assert 1 == result.code
    assert result.err.startswith("lite-agent: line 2: not JSON")
    assert "line 3: role must be 'user' or 'assistant'" in result.err
    assert "nothing was written" in result.err.splitlines()[-1]
    assert [] == cli.ok("sessions", "--json").json()


def test_unknown_sessions_and_checkpoints_are_usage_errors(cli: Cli) -> None:
    """A missing session or a seq that is not a checkpoint: exit 2 and a one-line reason that
    says where to look; nothing was changed."""
    missing = cli("checkpoints", "nope")
    assert (2, 1) == (missing.code, len(missing.err.splitlines()))
    assert missing.err.startswith("lite-agent: no session nope in ")
    assert missing.err.endswith("(`lite-agent sessions` lists them)\n")
    two_prompts(cli)
    head = cli.events("s1")[-1].seq
    wrong = cli("restore", "s1", "3")
    assert 2 == wrong.code
    assert (
        "lite-agent: seq 3 is not a checkpoint of session s1 (its checkpoints: 2, 11; "
        "`lite-agent checkpoints s1` shows them)\n"
    ) == wrong.err
    assert head == cli.events("s1")[-1].seq


def test_a_provider_error_exits_1_and_the_log_records_the_abort(cli: Cli) -> None:
    """A scripted overload: exit 1 naming it; the session records the aborted turn."""
    result = cli(
        "run",
        "hi",
        "--session",
        "s1",
        provider=cli.script({"error": "overloaded", "message": "try later"}),
    )
    assert 1 == result.code
    assert "lite-agent: try later\n" == result.err
    assert "turn_aborted" == cli.events("s1")[-1].kind


def test_the_sqlite_backend(cli: Cli) -> None:
    """--backend sqlite --db PATH keeps the sessions in that database."""
    db = cli.root / "s.db"
    cli.ok(
        "--backend",
        "sqlite",
        "--db",
        str(db),
        "run",
        "hi",
        "--session",
        "q",
        provider=cli.script({"text": "Hello."}),
    )
    assert db.exists()
    assert ["q"] == [
        s["id"] for s in cli.ok("--backend", "sqlite", "--db", str(db), "sessions", "--json").json()
    ]
    assert [] == cli.ok("sessions", "--json").json()  # the file store is another store


def test_interactive_without_a_key_says_so_in_one_line(cli: Cli) -> None:
    """No ANTHROPIC_API_KEY: one line pointing at the demo, exit 1."""
    result = cli()
    assert 1 == result.code
    [line] = result.err.splitlines()
    assert "ANTHROPIC_API_KEY" in line
    assert "lite-agent demo" in line


def test_run_with_claude_over_the_real_client(cli: Cli) -> None:
    """The default provider: the real anthropic client, here against the fake server."""
    with FakeMessagesServer() as fake:
        fake.add(message([text("Hello from Claude.")]))
        result = cli(
            "run",
            "hi",
            "--json",
            env=clean_env(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=fake.base_url),
        )
        assert 0 == result.code, result
        assert "Hello from Claude." == result.json()["text"]
        [request] = fake.requests
    assert "claude-sonnet-4-5" == request.body["model"]


def test_state_of_a_session_written_by_the_cli_folds(cli: Cli) -> None:
    """What the CLI wrote is an ordinary log: it folds, with one checkpoint per prompt."""
    two_prompts(cli)
    state = fold(cli.events("s1"))
    assert 2 == len(state.checkpoints)
    assert state.pending_restore is None
