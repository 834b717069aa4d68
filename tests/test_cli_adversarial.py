"""``lite-agent`` driven adversarially, in real processes: the defect classes randomized and
hostile runs found beyond the contract sweep of ``test_cli_contract.py``.

- an output that cannot be written while a turn, compaction or restore is shown live (a full
  disk) is one line in CLI words, never asyncio's traceback, and the operation is still stored;
  ``--help`` on a full disk fails instead of exiting 0 with nothing written;
- an output whose encoding is not UTF-8 (``PYTHONIOENCODING``, a Latin-1 locale) gets every
  character (escaped where it cannot carry it), and JSON is UTF-8 whatever the locale;
- the interactive mode's seq arguments (``/restore ²``, a 5,000-digit number) are refused in
  its words, and the session goes on;
- options that would be ignored or checked differently by another route (``--db`` without
  ``--backend sqlite``, a ``$LITE_AGENT_HOME`` that is a file) are usage errors, and a dry
  ``gc`` creates no store;
- ``replay`` says what it shows in CLI words (no class names, no ``None``), and ``--verify
  --at`` before the first request says so rather than that no turn called the model.

``pytest -m soak tests/test_cli_adversarial.py`` runs the random interactive lines longer.
"""

from __future__ import annotations

import json
import random
import re
import subprocess

import pytest
from _cli_runner import LITE_AGENT, Cli, Result, Terminal, clean_env, two_prompts

pytestmark = pytest.mark.processes

_PYTHON_WORDS = re.compile(
    r"Traceback|\b[A-Z][A-Za-z]*(?:Error|Exception|Block)\b|<\w+ object at |NoneType"
    r"|\[Errno|\bint\(\)|\(None\)|\"exception\":"
)
_FULL_DISK = "import os\nfd = os.open('/dev/full', os.O_WRONLY)\nos.dup2(fd, 1)\nos.close(fd)\n"


def _no_python_words(text: str) -> None:
    assert not _PYTHON_WORDS.search(text), text


def _store(cli: Cli) -> dict[str, bytes]:
    """Every stored file's bytes (leases aside: a command takes and frees them)."""
    return {
        str(p.relative_to(cli.home)): p.read_bytes()
        for p in sorted(cli.home.rglob("*"))
        if p.is_file() and not p.name.endswith(".lease")
    }


def _real(cli: Cli, *argv: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    """The installed ``lite-agent`` (a new interpreter: what it reads at start-up applies)."""
    return subprocess.run(
        [str(LITE_AGENT), "--workdir", str(cli.work), "--home", str(cli.home), *argv],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        env=clean_env(**env),
        timeout=60,
        check=False,
    )


# ---------------------------------------------------------------------------------------------
# an output that cannot be written


@pytest.mark.parametrize(
    ("argv", "head"),
    [(["restore", "s1", "11"], 10), (["run", "again", "--session", "s1"], 23)],
    ids=["restore", "run"],
)
def test_live_output_to_a_full_disk_is_one_line(cli: Cli, argv: list[str], head: int) -> None:
    """A restore or turn shown live on a full stdout: exit 1, one stderr line saying the output
    could not be written (no traceback of the event loop), and the operation is stored."""
    two_prompts(cli)
    assert 19 == len(cli.events("s1"))
    provider = cli.script({"text": "x" * 3000}) if argv[0] == "run" else None
    result = cli(*argv, provider=provider, prelude=_FULL_DISK)
    assert 1 == result.code, result
    assert 1 == len(result.err.splitlines()), result.err
    assert result.err.startswith("lite-agent: cannot write the output: No space left on device")
    _no_python_words(result.err)
    assert head == len(cli.events("s1"))


@pytest.mark.parametrize("argv", [["--help"], ["replay", "--help"]], ids=["main", "replay"])
def test_help_to_a_full_disk_fails(cli: Cli, argv: list[str]) -> None:
    """--help whose text cannot be written exits 1 saying why (argparse's own ignored the
    error and exited 0)."""
    result = cli(*argv, prelude=_FULL_DISK)
    assert (1, "lite-agent: No space left on device\n") == (result.code, result.err)


# ---------------------------------------------------------------------------------------------
# an output that is not UTF-8


@pytest.fixture
def accented(cli: Cli) -> Cli:
    """A store with s1 (two prompts) and s2, a session of non-ASCII text."""
    two_prompts(cli)
    transcript = cli.root / "t.jsonl"
    transcript.write_text(
        '{"role": "user", "content": "café → ✓ ' + "ü" * 80 + '"}\n'
        '{"role": "assistant", "content": "naïve … ok"}\n',
        encoding="utf-8",
    )
    cli.ok("import", str(transcript), "--session", "s2")
    return cli


@pytest.mark.parametrize(
    ("argv", "encoding"),
    [
        (["replay", "s2"], "ascii"),
        (["restore", "s1", "2", "--dry-run"], "latin-1"),
        (["checkpoints", "s2"], "ascii"),
    ],
    ids=["replay-ascii", "dry-run-latin-1", "checkpoints-ascii"],
)
def test_human_output_in_a_narrow_encoding(accented: Cli, encoding: str, argv: list[str]) -> None:
    """Human output through an encoding that lacks '…' and '→': exit 0, every line written
    (what the encoding cannot carry as an escape), nothing on stderr."""
    done = _real(accented, *argv, PYTHONIOENCODING=encoding)
    assert (0, b"") == (done.returncode, done.stderr), done
    text = done.stdout.decode(encoding)
    assert text.endswith("\n")
    if argv[0] == "replay":
        assert "caf" in text
    _no_python_words(text)


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["export", "s2"], 0),
        (["checkpoints", "s2", "--json"], 0),
        (["export", "nosü", "--json"], 2),
    ],
    ids=["export", "checkpoints", "error"],
)
def test_json_is_utf8_in_any_locale(accented: Cli, argv: list[str], code: int) -> None:
    """JSON (--json, export's JSON Lines) through an ASCII or Latin-1 stdout is UTF-8 that
    parses, an error document too; nothing on stderr."""
    done = _real(accented, *argv, PYTHONIOENCODING="latin-1")
    assert (code, b"") == (done.returncode, done.stderr), done
    text = done.stdout.decode("utf-8")
    if "--json" in argv:
        document = json.loads(text)
        assert ("error" in document) == (code != 0)
        assert ("nosü" in document["error"]["message"]) if code else ("café" in text)
    else:  # JSON Lines
        messages = [json.loads(line) for line in text.splitlines()]
        assert "café → ✓ " + "ü" * 80 == messages[0]["content"]


# ---------------------------------------------------------------------------------------------
# the interactive mode's arguments

_NOT_SEQS = ["¹", "²", "٣", "9" * 5000, "99999999999999999999999", "0", "-1", "1.0", "0x2"]


def _repl(cli: Cli, lines: list[str]) -> Result:
    """The interactive mode reading ``lines`` (then the end of the input)."""
    return cli(provider=cli.script({"text": "ok"}), stdin="".join(f"{x}\n" for x in lines))


@pytest.mark.parametrize("word", _NOT_SEQS, ids=lambda w: w if len(w) < 30 else "5000 digits")
def test_repl_refuses_a_seq_that_is_no_number(cli: Cli, word: str) -> None:
    """``/restore X`` and ``/fork X`` for what is not a checkpoint's seq (a superscript digit,
    a number too long for int()): refused in the prompt's words, the session goes on to
    /sessions, exit 0."""
    two_prompts(cli)
    before = _store(cli)
    result = _repl(cli, ["/resume s1", f"/restore {word}", f"/fork {word}", "/sessions"])
    assert (0, "") == (result.code, result.err), result
    refusals = re.findall(
        r"usage: /(?:restore|fork) |is not a checkpoint of this session", result.out
    )
    assert 2 == len(refusals), result.out
    assert "s1" in result.out.split("/fork")[-1]  # /sessions ran after both
    _no_python_words(result.out)
    assert before == _store(cli)


_REPL_WORDS = [
    "/restore",
    "/fork",
    "/resume",
    "/undo",
    "/checkpoints",
    "/sessions",
    "/bogus",
    "/restore --conversation-only",
]
_REPL_ARGS = [*_NOT_SEQS, "", "../x", "branch..x", "a" * 300, "\x1b[2J", "s1 s1", "é", "--x"]


def _random_repl(cli: Cli, seed: int, lines: int) -> list[str]:
    """Random slash commands with hostile arguments in one interactive session; the
    problems found (none expected)."""
    rng = random.Random(seed)
    two_prompts(cli)
    before = _store(cli)
    typed = [f"{rng.choice(_REPL_WORDS)} {rng.choice(_REPL_ARGS)}".strip() for _ in range(lines)]
    result = _repl(cli, ["/resume s1", *typed, "/help"])
    problems = []
    if (result.code, result.err) != (0, ""):
        problems.append(f"exit {result.code}, stderr {result.err[-500:]!r}")
    if "/exit" not in result.out.rsplit("> ", 2)[-2]:  # /help, the last line, was answered
        problems.append(f"the session ended early: {result.out[-500:]!r}")
    if _PYTHON_WORDS.search(result.out) or "internal error" in result.out:
        problems.append(f"Python words: {result.out[-800:]!r}")
    if before != _store(cli):
        problems.append("the store changed")
    return [f"seed {seed}: {p} after {typed}" for p in problems]


@pytest.mark.parametrize("seed", [1, 2])
def test_random_repl_lines_keep_the_session(cli: Cli, seed: int) -> None:
    """Random slash commands with hostile arguments: each is answered in the prompt's words,
    the session reaches its last line, exits 0, and nothing stored changes."""
    assert [] == _random_repl(cli, seed, 25)


@pytest.mark.soak
@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", range(100, 120))
def test_random_repl_lines_keep_the_session_soak(cli: Cli, seed: int) -> None:
    """The random interactive lines, longer."""
    assert [] == _random_repl(cli, seed, 150)


# ---------------------------------------------------------------------------------------------
# options that another route would ignore or check otherwise


def test_db_without_the_sqlite_backend_is_a_usage_error(cli: Cli) -> None:
    """--db with the file backend (which would ignore it and store elsewhere) exits 2 naming
    --backend sqlite, under --json as one document; nothing is created."""
    db = cli.root / "s.db"
    result = cli("--db", str(db), "run", "hi", "--json", provider=cli.script({"text": "ok"}))
    assert (2, "") == (result.code, result.err), result
    error = json.loads(result.out)["error"]
    assert "usage" == error["type"]
    assert "--backend sqlite" in error["message"]
    assert not db.exists()
    assert not cli.home.exists()


@pytest.mark.parametrize(
    "argv", [["sessions", "--json"], ["gc", "--json"], ["run", "hi", "--json"]], ids=str
)
def test_a_home_variable_that_is_a_file_is_a_usage_error(cli: Cli, argv: list[str]) -> None:
    """$LITE_AGENT_HOME naming a file is refused as --home naming one is (exit 2, one
    document), not listed as an empty store or failed as an I/O error."""
    home = cli.root / "home-file"
    home.write_text("not a folder")
    result = cli.server.run(
        "--workdir",
        str(cli.work),
        "--provider",
        cli.script({"text": "ok"}),
        *argv,
        env=clean_env(LITE_AGENT_HOME=str(home)),
    )
    assert (2, "") == (result.code, result.err), result
    message = json.loads(result.out)["error"]["message"]
    assert "LITE_AGENT_HOME" in message
    assert "is a file, not a folder" in message
    assert "not a folder" == home.read_text()


def test_gc_dry_run_creates_no_store(cli: Cli) -> None:
    """gc --dry-run where nothing is stored reports nothing to collect and creates nothing."""
    result = cli.ok("gc", "--dry-run", "--json")
    assert {"sessions": 0, "deleted": 0, "dry_run": True}.items() <= result.json().items()
    assert not cli.home.exists()


# ---------------------------------------------------------------------------------------------
# replay in CLI words


def test_replay_names_blocks_in_cli_words(cli: Cli) -> None:
    """An assistant message of a block type liteagent keeps as it is and no stop reason:
    replay names the block's type, not a class, and shows no 'None'."""
    transcript = cli.root / "t.jsonl"
    transcript.write_text(
        '{"role": "user", "content": "hi"}\n'
        '{"role": "assistant", "content": [{"type": "server_tool_use", "id": "x", "name": "s",'
        ' "input": {}}, {"type": "text", "text": "ok"}]}\n',
        encoding="utf-8",
    )
    cli.ok("import", str(transcript), "--session", "t")
    out = cli.ok("replay", "t").out
    assert re.search(r"assistant_message\s+server_tool_use block, text 'ok'\n", out), out
    _no_python_words(out)
    view = cli.ok("replay", "t", "--view").out
    assert "server_tool_use block" in view
    _no_python_words(view)


def test_verify_at_before_the_first_request_says_so(cli: Cli) -> None:
    """replay --verify --at SEQ before the session's first recorded request says there is
    none up to SEQ and where the first is, not that no turn called the model."""
    two_prompts(cli)
    first = next(e.seq for e in cli.events("s1") if e.kind == "model_request")
    out = cli.ok("replay", "s1", "--verify", "--at", "1").out
    assert (
        f"nothing to verify: session s1 has no recorded model request up to seq 1 (its first "
        f"is at seq {first})\n" == out
    )
    document = cli.ok("replay", "s1", "--verify", "--at", "1", "--json").json()
    assert (True, 0) == (document["nothing_to_verify"], document["requests"])


# ---------------------------------------------------------------------------------------------
# demo --dir


def test_demo_into_a_file_is_a_usage_error(cli: Cli) -> None:
    """demo --dir naming a file, or a folder under one, exits 2 as --home would (it failed
    with exit 1 and Python's 'Not a directory: ...'), and the file stays as it was."""
    file = cli.root / "f"
    file.write_text("keep")
    for folder in (file, file / "sub"):
        result = cli("demo", "--dir", str(folder))
        assert 2 == result.code, result
        assert result.err.startswith("lite-agent: --dir: "), result.err
        assert result.err.endswith("not a folder\n"), result.err
    assert "keep" == file.read_text()


def test_demo_refused_by_its_store_leaves_the_folder_usable(cli: Cli) -> None:
    """demo with a --db that is no database is refused (exit 2) without leaving the folders it
    made, so the same --dir works once the option is right."""
    garbage = cli.root / "garbage.db"
    garbage.write_text("not a database")
    folder = cli.root / "new" / "demo"
    refused = cli("--backend", "sqlite", "--db", str(garbage), "demo", "--dir", str(folder))
    assert 2 == refused.code, refused
    assert "not a SQLite database" in refused.err
    assert not (cli.root / "new").exists()
    assert "not a database" == garbage.read_text()


# ---------------------------------------------------------------------------------------------
# seq arguments


@pytest.mark.parametrize(
    "argv",
    [
        ["restore", "s1", "1_1"],
        ["restore", "s1", " 11"],
        ["restore", "s1", "\u0661\u0661"],  # Arabic-Indic 11
        ["fork", "s1", "+2"],
        ["replay", "s1", "--at", "٣"],
        ["replay", "s1", "--at", "9" * 5000],
    ],
    ids=["underscore", "space", "arabic-indic", "plus", "at-arabic-indic", "at-5000-digits"],
)
def test_a_seq_is_ascii_digits(cli: Cli, argv: list[str]) -> None:
    """A seq in a form int() reads but nobody types for one ('1_1' is checkpoint 11 to int):
    a usage error naming the argument, in one JSON document, and nothing restored or forked."""
    two_prompts(cli)
    before = _store(cli)
    work = sorted(p.name for p in cli.work.iterdir())
    result = cli(*argv, "--json")
    assert (2, "") == (result.code, result.err), result
    message = json.loads(result.out)["error"]["message"]
    assert re.match(r"argument (SEQ|--at): .*(is not a seq|is no seq of a log)", message), message
    _no_python_words(message)
    assert before == _store(cli)
    assert work == sorted(p.name for p in cli.work.iterdir())


def test_finish_restores_without_repair_is_a_usage_error(cli: Cli) -> None:
    """doctor --finish-restores without --repair (which would only check, finishing nothing,
    and exit as if asked to) exits 2 naming --repair; nothing is changed."""
    two_prompts(cli)
    before = _store(cli)
    result = cli("doctor", "--finish-restores", "--json")
    assert (2, "") == (result.code, result.err), result
    error = json.loads(result.out)["error"]
    assert "usage" == error["type"]
    assert "--finish-restores needs --repair" in error["message"]
    assert before == _store(cli)


def test_tool_arguments_are_shown_as_json_not_python(cli: Cli) -> None:
    """A tool call whose shown argument is not a string (null, a list, an object): the live
    line of run and the line of replay show its JSON text, never Python's repr (None,
    ['ls'], {'a': True})."""
    result = cli.ok(
        "run",
        "go",
        "--session",
        "s1",
        provider=cli.script(
            {"tool": "read_file", "input": {"path": None}},
            {"tool": "bash", "input": {"command": ["ls", "-l"]}},
            {"tool": "glob", "input": {"pattern": {"a": True}}},
            {"text": "done"},
        ),
    )
    for out in (result.out, cli.ok("replay", "s1").out):
        assert "read_file null" in out.replace("(", " ").replace(")", "")
        assert '["ls", "-l"]' in out
        assert '{"a": true}' in out
        for python in ("None", "['ls'", "True}"):
            assert python not in out, out


def test_a_huge_columns_on_a_terminal_is_capped(cli: Cli) -> None:
    """COLUMNS=99999999 on a terminal: compact's progress bar is drawn at most 1,000 columns
    wide (each refresh wrote 99,999,999 spaces, and the command did not end)."""
    two_prompts(cli)
    argv = [str(LITE_AGENT), "--workdir", str(cli.work), "--home", str(cli.home), "compact", "s1"]
    terminal = Terminal(argv, clean_env(TERM="xterm-256color", COLUMNS="99999999"))
    try:
        assert 0 == terminal.wait(20)
    finally:
        terminal.close()
    assert re.search(r"compacted|nothing to reduce", terminal.seen), terminal.seen[-500:]
    assert max(len(line) for line in terminal.raw.splitlines()) < 5_000


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["--home", "~nosuchuser/h", "sessions"], {}, "--home ~nosuchuser/h"),
        (["--workdir", "~nosuchuser", "sessions"], {}, "--workdir ~nosuchuser"),
        (["--backend", "sqlite", "--db", "~nosuchuser/s.db", "gc"], {}, "--db ~nosuchuser/s.db"),
        (["demo", "--dir", "~nosuchuser/d"], {}, "--dir ~nosuchuser/d"),
        (["sessions"], {"LITE_AGENT_HOME": "~nosuchuser"}, "LITE_AGENT_HOME=~nosuchuser"),
    ],
    ids=["home", "workdir", "db", "demo-dir", "env-home"],
)
def test_a_path_of_an_unknown_user_is_a_usage_error(
    cli: Cli, argv: list[str], env: dict[str, str], named: str
) -> None:
    """A path starting ~nosuchuser (pathlib cannot expand it: an internal error before) is a
    usage error naming the option, under --json one document; nothing is created."""
    json_flag = [] if argv[0] == "demo" else ["--json"]
    result = cli.server.run(*argv, *json_flag, env=clean_env(**env), cwd=cli.root)
    assert 2 == result.code, result
    message = json.loads(result.out)["error"]["message"] if json_flag else result.err
    assert f"{named}: ~nosuchuser is no home folder on this machine" in message, message
    assert ["work"] == [p.name for p in cli.root.iterdir()]


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        ("/dev/zero", "the script '/dev/zero' is larger than 64 MiB"),
        ("{root}/latin1.json", "is not UTF-8 text: byte 3 (0xe9) is not part of a UTF-8 character"),
    ],
    ids=["endless", "not-utf8"],
)
def test_a_script_that_cannot_be_read_is_a_usage_error(cli: Cli, script: str, reason: str) -> None:
    """--provider scripted:/dev/zero is refused at 64 MiB (it read until the memory ran out),
    and a script that is not UTF-8 is said so in CLI words (not Python's codec message)."""
    (cli.root / "latin1.json").write_bytes(b'["\xe9"]')
    provider = "scripted:" + script.format(root=cli.root)
    result = cli("run", "hi", "--json", provider=provider)
    assert (2, "") == (result.code, result.err), result
    message = json.loads(result.out)["error"]["message"]
    assert reason in message, message
    assert "codec" not in message
    assert not cli.home.exists()
