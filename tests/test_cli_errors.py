"""How ``lite-agent`` fails, in real processes: usage errors exit 2, every failure is one line
in CLI words (no class names, reprs or tracebacks) or, with ``--json``, one JSON document on
stdout; a closed stdout ends a command quietly; a session running in another process is
refused naming that process."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from _cli_runner import LITE_AGENT, Cli, Result, clean_env, two_prompts, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.processes

_PYTHON_WORDS = re.compile(r"Traceback|\b[A-Z][A-Za-z]*(?:Error|Exception)\b|<\w+ object at ")


def assert_cli_words(err: str) -> None:
    """No traceback, exception class name or object repr in ``err``."""
    assert not _PYTHON_WORDS.search(err), err


def assert_one_json_error(result: Result, code: int, kind: str) -> dict[str, str]:
    """``result`` is exit ``code`` with exactly one JSON error document of ``kind`` on stdout
    and nothing on stderr; returns the error object."""
    assert code == result.code, result
    assert "" == result.err
    document = json.loads(result.out)
    assert ["error"] == list(document)
    assert kind == document["error"]["type"]
    assert_cli_words(document["error"]["message"])
    return document["error"]


@pytest.fixture
def session(cli: Cli) -> Cli:
    """A CLI whose store holds session s1 (two prompts, checkpoints at seqs 2 and 11)."""
    two_prompts(cli)
    return cli


USAGE_ERRORS = [
    (
        ["--provider", "bogus", "run", "hi"],
        "--provider bogus: expected anthropic, scripted:FILE or replay:SESSION",
    ),
    (["--provider", "scripted:", "run", "hi"], "--provider scripted:: name the scripted source"),
    (
        ["--provider", "scripted:/no/such/script.json", "run", "hi"],
        "--provider scripted:/no/such/script.json: cannot read the script",
    ),
    (["--provider", "replay:nope", "run", "hi"], "--provider replay:nope: no session nope in"),
    (["replay", "s1", "--at", "999"], "--at 999 is outside the log: session s1 has seqs 1..19"),
    (["replay", "s1", "--at", "0", "--view"], "--at 0 is outside the log"),
    (["restore", "s1", "3"], "seq 3 is not a checkpoint of session s1 (its checkpoints: 2, 11"),
    (["restore", "nope", "2"], "no session nope in "),
    (["checkpoints", "no/pe"], "no/pe is not a session id"),
    (["run", "hi", "--session", "../x"], "--session ../x: not a session id"),
    (["--workdir", "/no/such/folder", "sessions"], "--workdir /no/such/folder is not a folder"),
    (["restore", "s1"], "the following arguments are required: SEQ"),
    (["replay", "s1", "--at", "x"], "argument --at: x is not a seq (a whole number"),
    (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
    (["run", "hi", "--session", ""], '--session "": not a session id'),
    (["run", ""], 'PROMPT is empty: give the text to send (lite-agent run "fix the'),
    (["run", " \t\n"], "PROMPT is empty: give the text to send"),
    (["run", "\udcff"], "PROMPT: the prompt is not valid text: a lone surrogate"),
    (["compact", "s1", "keep \udcff"], "INSTRUCTIONS is not valid text: a lone surrogate"),
    (["import", "/no/such/file.jsonl"], "cannot read '/no/such/file.jsonl': No such file"),
    (["import", "/"], "cannot read '/': Is a directory"),
    (["gc", "--grace", "99999999999999999999d"], "--grace 99999999999999999999d: too long"),
    (
        ["--backend", "sqlite", "--db", "/", "sessions"],
        "--db: file '/' is a folder, not a database file",
    ),
    (
        ["--backend", "sqlite", "--db", "/dev/null/x.db", "sessions"],
        "--db: file '/dev/null/x.db': a part of its folder is a file, not a folder",
    ),
]


@pytest.mark.parametrize(
    ("argv", "reason"), USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS]
)
def test_usage_errors_exit_2_with_one_line_in_cli_words(
    session: Cli, argv: list[str], reason: str
) -> None:
    """A command line that asks for what cannot be: exit 2, nothing on stdout, the reason on
    the last line of stderr (after the usage, for the parser's own errors)."""
    head = session.events("s1")[-1].seq
    result = session(*argv)
    assert 2 == result.code, result
    assert "" == result.out
    assert result.err.splitlines()[-1].startswith(f"lite-agent: {reason}")
    assert_cli_words(result.err)
    assert head == session.events("s1")[-1].seq


@pytest.mark.parametrize(
    ("argv", "reason"), USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS]
)
def test_usage_errors_under_json_are_one_document(
    session: Cli, argv: list[str], reason: str
) -> None:
    """The same usage errors with --json: exit 2 and one JSON document on stdout."""
    error = assert_one_json_error(session(*argv, "--json"), 2, "usage")
    assert error["message"].startswith(reason)


def test_no_api_key_says_what_to_do(cli: Cli) -> None:
    """Claude without ANTHROPIC_API_KEY: exit 1 and one line naming the variable and the demo,
    not the Python keyword argument the library mentions."""
    result = cli("run", "hi")
    assert 1 == result.code
    assert (
        "lite-agent: no ANTHROPIC_API_KEY set: set it to talk to Claude, or try "
        "`lite-agent demo` (offline, no key needed) or --provider scripted:FILE\n"
    ) == result.err
    error = assert_one_json_error(cli("run", "hi", "--json"), 1, "no_api_key")
    assert "set it to talk to Claude, or try `lite-agent demo`" in error["message"]


def test_failures_under_json_are_one_document(session: Cli) -> None:
    """A refused restore and a model error with --json: exit 1, one JSON document naming the
    kind, the message in CLI words, the refused files listed."""
    (session.work / "a.txt").write_text("mine\n")
    refused = assert_one_json_error(session("restore", "s1", "2", "--json"), 1, "refused")
    assert refused["message"].startswith("restore refused, nothing was changed: a.txt: ")
    assert [refused["message"].removeprefix("restore refused, nothing was changed: ")] == refused[
        "details"
    ]
    model = assert_one_json_error(
        session(
            "run",
            "hi",
            "--json",
            provider=session.script({"error": "overloaded", "message": "try later"}),
        ),
        1,
        "model",
    )
    # the run started a new session: the report names it, so a script can resume it
    assert f"try later (session {model['session_id']}; " in model["message"]


def test_a_cancelled_run_is_reported_in_cli_words(cli: Cli) -> None:
    """A turn cancelled by SIGINT (sent by the scripted model's own process after it started):
    exit 1, one line saying it was cancelled, and the log records the aborted turn."""
    prelude = (
        "import os, signal, threading\n"
        "threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
    )
    result = cli(
        "run",
        "hi",
        "--session",
        "s1",
        provider=cli.script({"text": "too late", "delay": 60}),
        prelude=prelude,
    )
    assert 1 == result.code
    assert "lite-agent: cancelled (interrupted (Ctrl-C))\n" == result.err
    assert "turn_aborted" == cli.events("s1")[-1].kind


def _big_session(cli: Cli) -> None:
    """Session big: more output than a pipe holds (its export, and its replay --json)."""
    cli.ok(
        "run",
        "write it",
        "--session",
        "big",
        provider=cli.script(
            *[write(f"f{i}.txt", "x" * 20_000) for i in range(8)], {"text": "y" * 100_000}
        ),
    )


@pytest.mark.parametrize(
    "command", [["export", "big"], ["replay", "big", "--json"]], ids=["export", "replay --json"]
)
def test_a_closed_stdout_ends_the_command_quietly(cli: Cli, command: list[str]) -> None:
    """``lite-agent export ID | head -1``: the reader takes one line and goes away; the command
    stops with exit code 0 and writes nothing to stderr (no "Broken pipe")."""
    _big_session(cli)
    with subprocess.Popen(
        [str(LITE_AGENT), "--workdir", str(cli.work), "--home", str(cli.home), *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()  # the reader is gone; the rest does not fit the pipe
        err = proc.stderr.read()
        assert 0 == proc.wait(60)
    assert first
    assert b"" == err


def _shell(cli: Cli, command: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    flags = f"--workdir {cli.work} --home {cli.home}"
    return subprocess.run(
        ["/bin/bash", "-c", command.replace("lite-agent", f"{LITE_AGENT} {flags}")],
        input=stdin,
        capture_output=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )


def test_an_output_that_cannot_be_written_is_no_traceback(session: Cli) -> None:
    """A command started with stdout closed runs and exits 0 (nobody reads its output); one
    whose stdout is a full disk fails with exit 1 and says so on stderr, in CLI words. Neither
    writes a traceback; a failure still has its own exit code."""
    closed = _shell(session, "lite-agent sessions >&-")
    assert (0, b"") == (closed.returncode, closed.stderr)
    for command, code in [
        ("lite-agent sessions --json >/dev/full", 1),
        ("lite-agent export s1 >/dev/full", 1),
        ("lite-agent checkpoints nope --json >/dev/full", 2),
    ]:
        full = _shell(session, command)
        assert code == full.returncode, full
        err = full.stderr.decode()
        assert "No space left on device" in err
        assert_cli_words(err)


def test_import_from_stdin_refuses_what_is_not_utf8_like_a_file(cli: Cli, tmp_path: Path) -> None:
    """Bytes that are not UTF-8 are refused on stdin as in a file (never imported with
    stand-ins for the bad bytes); with --json the failure is one document and stderr stays
    empty."""
    line = b'{"role": "user", "content": "caf\xe9"}\n'
    (tmp_path / "latin1.jsonl").write_bytes(line)
    for command in ["lite-agent import -", f"lite-agent import {tmp_path / 'latin1.jsonl'}"]:
        run = _shell(cli, command, stdin=line)
        assert 1 == run.returncode
        assert b"is not UTF-8 text" in run.stderr
        as_json = _shell(cli, command + " --json", stdin=line)
        assert (1, b"") == (as_json.returncode, as_json.stderr)
        assert "invalid" == json.loads(as_json.stdout)["error"]["type"]
    bad = _shell(cli, "lite-agent import - --json", stdin=b"nope\n")
    assert (1, b"") == (bad.returncode, bad.stderr)
    assert ["line 1: not JSON"] == [
        d.split(" (")[0] for d in json.loads(bad.stdout)["error"]["details"]
    ]
    assert [] == cli.ok("sessions", "--json").json()


def test_the_shell_pipeline_exits_quietly(cli: Cli) -> None:
    """The same through a real shell pipeline: ``| head -1`` prints one line, and the
    pipeline's first command exits 0 without a word on stderr."""
    _big_session(cli)
    flags = f"--workdir {cli.work} --home {cli.home}"
    run = subprocess.run(
        ["/bin/bash", "-c", f"set -o pipefail; {LITE_AGENT} {flags} export big | head -1"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert 0 == run.returncode, run.stderr
    assert "" == run.stderr
    assert 1 == len(run.stdout.splitlines())


def test_a_session_running_in_another_process_is_busy(cli: Cli, tmp_path: Path) -> None:
    """While another process runs a turn of s1, run, restore and compact of s1 fail with exit
    1 and one line naming that process; nothing is written; --json says "busy"."""
    two_prompts(cli)
    slow = write_slow_script(tmp_path / "slow.json")
    holder = subprocess.Popen(
        [
            str(LITE_AGENT),
            "--workdir",
            str(cli.work),
            "--home",
            str(cli.home),
            "--provider",
            slow,
            "run",
            "slow",
            "--session",
            "s1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=clean_env(),
    )
    try:
        deadline = time.monotonic() + 60
        while not any(e.kind == "user_prompt" and e.body.text == "slow" for e in cli.events("s1")):
            assert time.monotonic() < deadline, "the holder did not start its turn"
            assert holder.poll() is None, "the holder ended early"
            time.sleep(0.1)
        head = cli.events("s1")[-1].seq
        for argv in (["run", "hi", "--session", "s1"], ["restore", "s1", "2"], ["compact", "s1"]):
            provider = cli.script({"text": "unused"})
            result = cli(*argv, provider=provider)
            assert 1 == result.code, (argv, result)
            [line] = result.err.splitlines()
            assert line.startswith("lite-agent: session s1 is running in another process"), line
            assert "nothing was changed" in line
            assert_cli_words(line)
            busy = assert_one_json_error(cli(*argv, "--json", provider=provider), 1, "busy")
            assert busy["message"] == line.removeprefix("lite-agent: ")
        assert head == cli.events("s1")[-1].seq
    finally:
        holder.send_signal(signal.SIGINT)
        holder.wait(60)
    assert 1 == holder.returncode  # the holder's turn was cancelled by its Ctrl-C


def write_slow_script(path: Path) -> str:
    """A script whose one answer takes a minute."""
    path.write_text(json.dumps([{"text": "done", "delay": 60}]), encoding="utf-8")
    return f"scripted:{path}"


_WORDS = st.sampled_from(
    [
        "run",
        "sessions",
        "checkpoints",
        "restore",
        "compact",
        "replay",
        "doctor",
        "export",
        "import",
        "demo",
        "s1",
        "nope",
        "2",
        "11",
        "999",
        "-1",
        "0",
        "x",
        "--at",
        "--view",
        "--verify",
        "--session",
        "--repair",
        "--conversation-only",
        "--provider",
        "bogus",
        "scripted:",
        "replay:s1",
        "--backend",
        "sqlite",
        "--db",
        "--model",
        "--dir",
        "-",
        "keep the API decisions",
        "--finish-restores",
        "--home",
        "--workdir",
    ]
)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(argv=st.lists(_WORDS, max_size=6))
def test_any_command_line_under_json_is_one_document(session: Cli, argv: list[str]) -> None:
    """Whatever the command line (commands, options and values drawn at random, --json added):
    the exit code is 0, 1 or 2, stdout is one JSON document (an error when the code is not
    0), and stderr holds no traceback."""
    if "demo" in argv or "import" in argv:  # a demo writes a project; import reads stdin
        argv = [w for w in argv if w not in ("demo", "import")]
    result = session(*argv, "--json")
    assert result.code in (0, 1, 2), result
    document = json.loads(result.out)
    if result.code:
        assert {"error"} == set(document)
        assert_cli_words(document["error"]["message"])
    assert "Traceback" not in result.err


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(argv=st.lists(_WORDS, max_size=6))
def test_any_failing_command_line_says_why_in_cli_words(session: Cli, argv: list[str]) -> None:
    """Whatever the command line: the exit code is 0, 1 or 2, and a failure's last line on
    stderr is ``lite-agent: <reason>`` with no traceback, class name or repr."""
    if "demo" in argv or "import" in argv:
        argv = [w for w in argv if w not in ("demo", "import")]
    result = session(*argv)
    assert result.code in (0, 1, 2), result
    if result.code:
        assert result.err.splitlines()[-1].startswith("lite-agent: "), result
        assert_cli_words(result.err)
