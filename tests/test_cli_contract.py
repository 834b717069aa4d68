"""The CLI's contract, swept over every subcommand and situation, in real processes (the fork
server of ``_cli_runner``).

The contract, for every subcommand the parser has (:func:`test_the_tables_cover_every_subcommand`
keeps the tables complete):

- with ``--json`` every outcome, a failure too, is exactly one JSON document on stdout (a
  failure: ``{"error": {"type": ..., "message": ...}}``; ``doctor`` and ``replay --verify``
  report their findings in their own document) and nothing on stderr;
- without it a failure is one last stderr line ``lite-agent: <reason>``;
- exit codes: 0 ok, 1 refused or failed, 2 usage error; messages in CLI words (no traceback,
  exception class, ``NoneType``, ``Errno`` or object repr);
- a closed stdout (``| head -1``) ends the command quietly, keeping a failure's exit code;
- output that is not a terminal has no escape codes, whatever ``TERM`` says; ``NO_COLOR`` on a
  terminal has no colour;
- hostile session ids, transcripts and a damaged store give a clear error, and what is stored
  stays as it was.

``pytest -m soak tests/test_cli_contract.py`` adds a long randomized sweep and real shell
pipelines (``lite-agent ... | head -1``) for every subcommand.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from _cli_runner import LITE_AGENT, Cli, CliServer, Result, Terminal, clean_env, two_prompts

from liteagent.sdk._cli import build_parser
from liteagent.sdk._cli_errors import failure, shown_arg

pytestmark = pytest.mark.processes

_PYTHON_WORDS = re.compile(
    r"Traceback|\b[A-Z][A-Za-z]*(?:Error|Exception)\b|<\w+ object at |NoneType|\[Errno"
    r"|\bsys\.\w+\(|\b(?:got|must be) (?:str|int|float|bool|list|dict|tuple)\b"
)
_ENV = {"TERM": "xterm-256color", "COLORTERM": "truecolor"}  # a pipe is still no terminal
_TRANSCRIPT = '{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "hello"}\n'
_BREAK_STDOUT = (  # the reader of stdout has gone before the command writes a byte
    "import os\nr, w = os.pipe()\nos.dup2(w, 1)\nos.close(r)\nos.close(w)\n"
)


# ---------------------------------------------------------------------------------------------
# the tables


@dataclass(frozen=True)
class Cmd:
    """A subcommand's command line (``{sid}``: the session, ``{root}``: the test's folder) and
    its exit code in each situation; ``None``: the situation does not apply."""

    argv: tuple[str, ...]
    missing: int | None = 2  # the session does not exist
    no_store: int | None = 2  # nothing stored under the home yet
    damaged: int | None = 1  # the session's log has a flipped byte
    json: bool = True
    reports: bool = False  # exit 1 is a report of its own, not an error document
    model: bool = False  # calls the model: gets a scripted one
    setup: Callable[[Cli, str], None] | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        return self.argv[0]

    def line(self, cli: Cli, sid: str) -> list[str]:
        """The argv for session ``sid``."""
        return [a.format(sid=sid, root=cli.root) for a in self.argv]

    def __str__(self) -> str:
        return " ".join(self.argv)


def _restored(cli: Cli, sid: str) -> None:
    cli.ok("restore", sid, "11")


COMMANDS = [
    Cmd(("run", "hi", "--session", "{sid}"), missing=0, no_store=0, model=True),
    Cmd(("sessions",), missing=None, no_store=0, damaged=0),
    Cmd(("checkpoints", "{sid}")),
    Cmd(("restore", "{sid}", "11")),
    Cmd(("restore", "{sid}", "2", "--dry-run")),
    Cmd(("restore", "--undo", "{sid}"), setup=_restored),
    Cmd(("branches", "{sid}")),
    Cmd(("fork", "{sid}", "2")),
    Cmd(("gc", "--dry-run"), missing=None, no_store=0),
    Cmd(("compact", "{sid}")),
    Cmd(("replay", "{sid}")),
    Cmd(("replay", "{sid}", "--at", "5")),
    Cmd(("replay", "{sid}", "--view")),
    Cmd(("replay", "{sid}", "--verify"), reports=True),
    Cmd(("doctor",), missing=None, no_store=0, reports=True),
    Cmd(("export", "{sid}")),
    Cmd(("import", "{root}/t.jsonl", "--session", "{sid}-copy"), missing=0, no_store=0, damaged=0),
    Cmd(("demo", "--dir", "{root}/demo"), missing=None, no_store=0, damaged=None, json=False),
]

HOSTILE_IDS = ["", " ", "s1\n", "s1 ", "a\tb", "\x1b[2J", "../x", "a/b", "-", "é", "\udcff"]
HOSTILE_IDS += ["a" * 129, "branch..x"]


def test_the_tables_cover_every_subcommand() -> None:
    """Every subcommand of the parser has a row (a new one must be added to the sweep)."""
    parser = build_parser()
    (subs,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(subs.choices) == {c.name for c in COMMANDS}
    for name, sub in subs.choices.items():
        has_json = any("--json" in a.option_strings for a in sub._actions)
        assert has_json == all(c.json for c in COMMANDS if c.name == name), name


# ---------------------------------------------------------------------------------------------
# checking one outcome


def contract(result: Result, argv: list[str], *, as_json: bool, reports: bool = False) -> list[str]:
    """What ``result`` (of ``argv``) breaks of the contract (module docstring); [] if nothing."""
    problems = []
    if result.code not in (0, 1, 2):
        problems.append(f"exit code {result.code}")
    if "\x1b" in result.out + result.err:
        problems.append("an escape code off a terminal")
    if _PYTHON_WORDS.search(result.out + result.err):
        problems.append(f"Python words: {_PYTHON_WORDS.search(result.out + result.err)}")
    if as_json:
        try:
            document = json.loads(result.out)
        except ValueError:
            return [*problems, "stdout is not one JSON document"]
        if result.err:
            problems.append("stderr is not empty under --json")
        is_error = isinstance(document, dict) and list(document) == ["error"]
        if result.code == 0 and is_error:
            problems.append("an error document with exit code 0")
        if result.code and not is_error and not (reports and result.code == 1):
            problems.append("a failure without an error document")
        if is_error:
            error = document["error"]
            if not (isinstance(error.get("type"), str) and isinstance(error.get("message"), str)):
                problems.append("an error document without a type and a message")
            elif (result.code == 2) != (error["type"] == "usage"):
                problems.append(f"type {error['type']} with exit code {result.code}")
    elif result.code and not (reports and result.code == 1):
        lines = result.err.splitlines()
        if not lines or not lines[-1].startswith("lite-agent: "):
            problems.append("a failure whose last stderr line is not `lite-agent: <reason>`")
        if result.code == 2 and result.out:
            problems.append("a usage error that printed on stdout")
    return [f"{' '.join(map(repr, argv))} (exit {result.code}): {p}" for p in problems]


def message(result: Result, as_json: bool) -> str:
    """The failure's reason."""
    if as_json:
        return str(json.loads(result.out)["error"]["message"])
    return result.err.splitlines()[-1].removeprefix("lite-agent: ")


def _case(server: CliServer, root: Path, sid: str = "s1", *, store: bool = True) -> Cli:
    """A CLI in a folder of its own, with session ``sid`` stored (two prompts, checkpoints at
    seqs 2 and 11) unless not ``store``, and the transcript ``t.jsonl``."""
    root.mkdir(parents=True)
    cli = Cli(server, root)
    (root / "t.jsonl").write_text(_TRANSCRIPT, encoding="utf-8")
    if store:
        two_prompts(cli, sid)
    return cli


def _run(
    cli: Cli, cmd: Cmd, sid: str, as_json: bool, prelude: str = ""
) -> tuple[list[str], Result]:
    argv = cmd.line(cli, sid) + (["--json"] if as_json else [])
    provider = cli.script({"text": "ok"}, {"text": "ok"}) if cmd.model else None
    return argv, cli(*argv, provider=provider, env=clean_env(**_ENV), prelude=prelude)


def _variants() -> Iterator[tuple[Cmd, bool]]:
    for cmd in COMMANDS:
        yield cmd, False
        if cmd.json:
            yield cmd, True


def _stored(cli: Cli) -> dict[str, str]:
    """Every file under the home (the lease files aside) with a hash of its bytes."""
    if not cli.home.exists():
        return {}
    return {
        str(p.relative_to(cli.home)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(cli.home.rglob("*"))
        if p.is_file() and not p.name.endswith(".lease")
    }


def _log(cli: Cli, sid: str) -> Path:
    (project,) = (cli.home / "projects").iterdir()
    return project / "sessions" / f"{sid}.log"


# ---------------------------------------------------------------------------------------------
# the sweep: subcommand x situation


def test_every_subcommand_succeeds_within_the_contract(server: CliServer, tmp_path: Path) -> None:
    """Each subcommand on a healthy session (a store of its own per case): exit 0, and the
    output keeps the contract (text and --json)."""
    problems = []
    for n, (cmd, as_json) in enumerate(_variants()):
        cli = _case(server, tmp_path / f"c{n}")
        if cmd.setup:
            cmd.setup(cli, "s1")
        argv, result = _run(cli, cmd, "s1", as_json)
        problems += contract(result, argv, as_json=as_json, reports=cmd.reports)
        if result.code != 0:
            problems.append(f"{argv}: exit {result.code}, expected 0: {result.err or result.out}")
        if as_json and cmd.name != "export" and result.out.count("\n{") + result.out.count("\n["):
            problems.append(f"{argv}: more than one document")
    assert [] == problems


@pytest.mark.parametrize("situation", ["missing", "no_store"])
def test_a_session_that_is_not_there(server: CliServer, tmp_path: Path, situation: str) -> None:
    """Each subcommand naming a session that does not exist (in a store with another one, or
    with nothing stored yet): a usage error (exit 2) saying so, and nothing stored changes;
    the commands that need no session succeed."""
    problems = []
    for n, (cmd, as_json) in enumerate(_variants()):
        expected = getattr(cmd, situation)
        if expected is None:
            continue
        cli = _case(server, tmp_path / f"c{n}", store=situation == "missing")
        before = _stored(cli)
        argv, result = _run(cli, cmd, "nope", as_json)
        problems += contract(result, argv, as_json=as_json, reports=cmd.reports)
        if result.code != expected:
            problems.append(f"{argv}: exit {result.code}, expected {expected}: {result}")
        elif expected == 2:
            if "no session nope" not in message(result, as_json):
                problems.append(f"{argv}: {message(result, as_json)!r} names no missing session")
            if _stored(cli) != before:
                problems.append(f"{argv}: the store changed")
    assert [] == problems


def test_a_damaged_session(server: CliServer, tmp_path: Path) -> None:
    """Each subcommand on a session whose log has a flipped byte: the commands that read it
    fail with exit 1 and a reason that says it is damaged and points at doctor; listing and
    doctor report it; and not one stored byte changes (doctor without --repair included)."""
    problems = []
    for n, (cmd, as_json) in enumerate(_variants()):
        if cmd.damaged is None:
            continue
        cli = _case(server, tmp_path / f"c{n}")
        log = _log(cli, "s1")
        data = bytearray(log.read_bytes())
        data[len(data) // 2] ^= 0xFF
        log.write_bytes(bytes(data))
        before = _stored(cli)
        argv, result = _run(cli, cmd, "s1", as_json)
        problems += contract(result, argv, as_json=as_json, reports=cmd.reports)
        if result.code != cmd.damaged:
            problems.append(f"{argv}: exit {result.code}, expected {cmd.damaged}: {result}")
        elif result.code and not cmd.reports:
            said = message(result, as_json)
            if "corrupt" not in said or "lite-agent doctor" not in said:
                problems.append(f"{argv}: {said!r} does not say the log is damaged")
        after = {k: v for k, v in _stored(cli).items() if k in before}
        if after != before:
            problems.append(f"{argv}: stored bytes changed")
    assert [] == problems


def test_hostile_session_ids_are_refused_and_shown_as_given(
    server: CliServer, tmp_path: Path
) -> None:
    """Odd session ids (empty, whitespace, escape codes, a path, a lone surrogate from bytes
    that are not UTF-8, too long, a branch's id) in every place an id is given: exit 2, the id
    shown so that it cannot be mistaken (``"s1\\n"``, never ``s1``), nothing stored changes."""
    cli = _case(server, tmp_path / "c")
    before = _stored(cli)
    places = [c for c in COMMANDS if "{sid}" in " ".join(c.argv) and c.name != "import"]
    places += [
        Cmd(("import", "{root}/t.jsonl", "--session", "{sid}")),
        Cmd(("restore", "--undo", "s1", "--branch", "{sid}")),
        Cmd(("--provider", "replay:{sid}", "run", "hi")),
    ]
    problems = []
    for sid in HOSTILE_IDS:
        for cmd in places:
            for as_json in (False, True):
                argv = cmd.line(cli, sid) + (["--json"] if as_json else [])
                result = cli(*argv, env=clean_env(**_ENV))
                problems += contract(result, argv, as_json=as_json)
                if result.code != 2:
                    problems.append(f"{argv}: exit {result.code}, expected 2")
                    continue
                said = message(result, as_json)
                if "after the colon" in said and sid == "":  # --provider replay:
                    continue
                if sid != "branch..x" and shown_arg(sid) not in said:
                    problems.append(f"{argv}: {said!r} does not show {shown_arg(sid)}")
    assert [] == problems
    assert before == _stored(cli)


def test_a_closed_stdout_ends_every_subcommand_quietly(server: CliServer, tmp_path: Path) -> None:
    """``lite-agent ... | head -1`` where the reader has gone before a byte is written: every
    subcommand (and every --help) exits 0 without a word on stderr; a failure keeps its exit
    code and, under --json, stays silent on stderr."""
    problems = []
    for n, (cmd, as_json) in enumerate(_variants()):
        cli = _case(server, tmp_path / f"c{n}")
        if cmd.setup:
            cmd.setup(cli, "s1")
        argv, result = _run(cli, cmd, "s1", as_json, prelude=_BREAK_STDOUT)
        if (result.code, result.err) != (0, ""):
            problems.append(f"{argv}: exit {result.code}, stderr {result.err!r}")
        if cmd.missing == 2:
            argv, result = _run(cli, cmd, "nope", as_json, prelude=_BREAK_STDOUT)
            if result.code != 2 or (as_json and result.err):
                problems.append(f"{argv}: exit {result.code}, stderr {result.err!r}")
    cli = _case(server, tmp_path / "help", store=False)
    for argv in [["--help"], *[[c.name, "--help"] for c in COMMANDS]]:
        result = cli.server.run(*argv, prelude=_BREAK_STDOUT)
        if (result.code, result.err) != (0, ""):
            problems.append(f"{argv}: exit {result.code}, stderr {result.err!r}")
    assert [] == problems


def test_json_after_a_double_dash_is_an_argument(cli: Cli) -> None:
    """``--json`` after ``--`` is an argument, not the option: a usage error about it is said
    on stderr, not as a JSON document."""
    for argv in (["restore", "--", "--json"], ["checkpoints", "--", "--json"]):
        result = cli(*argv)
        assert 2 == result.code, result
        assert "" == result.out
        assert result.err.splitlines()[-1].startswith("lite-agent: ")


def test_help_of_every_subcommand(server: CliServer) -> None:
    """``--help`` of the command and of each subcommand: exit 0, the usage on stdout, nothing
    on stderr, no escape code off a terminal."""
    for argv in [["--help"], *[[c.name, "--help"] for c in COMMANDS]]:
        result = server.run(*argv, env=clean_env(**_ENV))
        assert (0, "") == (result.code, result.err), argv
        assert result.out.startswith("usage: lite-agent"), argv
        assert "\x1b" not in result.out, argv


def test_no_color_on_a_terminal_has_no_colour() -> None:
    """On a real terminal with NO_COLOR: a listing and a failure are written without colour
    (what NO_COLOR asks; bold headers are no colour)."""
    colour = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-9]|4[0-9]|9[0-7]|10[0-7])(?:;[0-9;]*)?m")
    for argv in (["sessions"], ["checkpoints", "nope"]):
        term = Terminal([str(LITE_AGENT), *argv], clean_env(NO_COLOR="1", TERM="xterm-256color"))
        try:
            term.wait(60)
        finally:
            term.close()
        assert not colour.search(term.raw), (argv, term.raw)


# ---------------------------------------------------------------------------------------------
# import: hostile transcripts

IMPORTS: list[tuple[str, bytes, str]] = [
    ("empty", b"", "the transcript has no messages"),
    ("blank lines", b"\n \n\t\n", "the transcript has no messages"),
    ("a byte-order mark only", "\ufeff".encode(), "the transcript has no messages"),
    ("NUL bytes", b"\x00" * 10, "line 1: not JSON"),
    ("binary", bytes(range(256)), "is not UTF-8 text: line 2, byte 118 (0x80)"),
    (
        "Latin-1",
        b'{"role": "user", "content": "ok"}\n{"role": "user", "content": "caf\xe9"}\n',
        "is not UTF-8 text: line 2, byte 33 (0xe9)",
    ),
    ("not objects", b'[1]\n"x"\n3\nnull\n', "line 4: a message must be an object, got null"),
    ("a list of messages", b'[{"role": "user", "content": "hi"}]\n', "got an array"),
    (
        "a wrong content type",
        b'{"role": "user", "content": 5}\n',
        "field 'content' must be a string or an array, got an integer",
    ),
    (
        "a wrong input type",
        b'{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "x", '
        b'"input": []}]}\n',
        "field 'input' must be an object, got an array",
    ),
    (
        "a huge integer",
        b'{"role": "user", "content": "x", "n": ' + b"9" * 5000 + b"}\n",
        "a number of 5000 digits is too long",
    ),
    ("nested too deeply", b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested too deeply"),
    ("a role of its own", b'{"role": "system", "content": "x"}\n', "role must be 'user'"),
    ("a key twice", b'{"role": "user", "role": "user", "content": "x"}\n', "appears twice"),
]


@pytest.mark.parametrize(
    ("data", "reason"), [(d, r) for _, d, r in IMPORTS], ids=[n for n, _, _ in IMPORTS]
)
def test_import_refuses_a_hostile_transcript_in_json_words(
    cli: Cli, data: bytes, reason: str
) -> None:
    """A transcript that is not one: exit 1, the reason names the line and says what is wrong
    in JSON's words (an array, null; never ``list`` or ``NoneType``), nothing is written; the
    same from a file and from stdin, as text and as one JSON document."""
    path = cli.root / "bad.jsonl"
    path.write_bytes(data)
    two_prompts(cli)
    before = _stored(cli)
    for source in (str(path), "-"):
        for as_json in (False, True):
            argv = ["import", source, *(["--json"] if as_json else [])]
            result = _shell(cli, argv, stdin=data)
            assert [] == contract(result, argv, as_json=as_json)
            assert 1 == result.code, result
            said = (
                json.dumps(json.loads(result.out)["error"], ensure_ascii=False)
                if as_json
                else result.err
            )
            assert reason in said.replace('\\"', '"'), said
    assert before == _stored(cli)


def _shell(cli: Cli, argv: list[str], stdin: bytes) -> Result:
    """``lite-agent argv`` with ``stdin`` as bytes (the fork server's stdin is text)."""
    path = cli.root / "stdin.bin"
    path.write_bytes(stdin)
    prelude = f"import os\nfd = os.open({str(path)!r}, os.O_RDONLY)\nos.dup2(fd, 0)\nos.close(fd)\n"
    return cli(*argv, prelude=prelude, env=clean_env(**_ENV))


def test_import_refuses_an_endless_input(cli: Cli) -> None:
    """``import /dev/zero`` (or a transcript larger than import reads) is refused once the
    limit is read, never read until the memory runs out; nothing is written."""
    small = "import liteagent.sdk._cli_transcript as t\nt.MAX_TRANSCRIPT_BYTES = 1 << 20\n"
    for argv in (["import", "/dev/zero"], ["import", "-"]):
        for as_json in (False, True):
            line = [*argv, *(["--json"] if as_json else [])]
            stdin = "import os\nfd = os.open('/dev/zero', os.O_RDONLY)\nos.dup2(fd, 0)\n"
            result = cli(*line, prelude=small + stdin, env=clean_env(**_ENV))
            assert [] == contract(result, line, as_json=as_json)
            assert 1 == result.code, result
            assert "is larger than 1 MiB, the most import reads" in message(result, as_json)
    assert not cli.home.exists()


def test_import_checks_the_session_id_before_reading(cli: Cli) -> None:
    """A bad --session is a usage error even when the transcript is bad too (the command line
    is checked first), in the CLI's words, naming the option."""
    (cli.root / "bad.jsonl").write_bytes(b"nope\n")
    result = cli("import", str(cli.root / "bad.jsonl"), "--session", "../x", "--json")
    error = json.loads(result.out)["error"]
    assert (2, "usage") == (result.code, error["type"])
    assert error["message"].startswith("--session ../x: not a session id (use 1-128 letters")


def test_out_of_memory_is_said_as_such() -> None:
    """A MemoryError (a transcript too large for the machine) is no "internal error"."""
    found = failure(MemoryError())
    assert ("failed", 1) == (found.type, found.code)
    assert "out of memory" in found.message


# ---------------------------------------------------------------------------------------------
# replay's options together


def test_replay_verify_honours_at_and_refuses_view(cli: Cli) -> None:
    """``replay --verify --at SEQ`` checks the requests up to SEQ (``--at`` is not ignored);
    ``--verify --view`` is a usage error rather than one of them silently."""
    two_prompts(cli)
    everything = cli.ok("replay", "s1", "--verify", "--json").json()
    first = cli.ok("replay", "s1", "--verify", "--at", "5", "--json").json()
    assert (4, 1) == (everything["requests"], first["requests"])
    result = cli("replay", "s1", "--verify", "--view", "--json")
    assert 2 == result.code
    assert "--view and --verify cannot be combined" in message(result, True)


# ---------------------------------------------------------------------------------------------
# randomized command lines


def _words(root: Path, script: str) -> list[str]:
    return [
        *(c.name for c in COMMANDS if c.name != "demo"),
        *("s1", "nope", "2", "11", "19", "-1", "0", "x", "99999999999999999999999"),
        *("--at", "--view", "--verify", "--session", "--repair", "--finish-restores"),
        *("--conversation-only", "--dry-run", "--undo", "--branch", "--into", str(root)),
        *("--grace", "0", "1h", "-5m", "nan", "--branch-retention", "--model", ""),
        *("--provider", "bogus", "scripted:", "replay:s1", "replay:", script),
        *("--backend", "sqlite", "--db", str(root / "x.db"), "--home", "--workdir"),
        *("--json", "--", "a b", "\x1b[2J", "é", "\n", "\udcff", "branch..x"),
        *(str(root / "t.jsonl"), str(root / "missing.jsonl"), "/dev/null", "/"),
    ]


def _sweep(server: CliServer, root: Path, seed: int, count: int) -> list[str]:
    """``count`` random command lines (seeded) against one store; the contract problems."""
    cli = _case(server, root / "sweep")
    cli.ok("restore", "s1", "11")
    words = _words(root, cli.script({"text": "ok"}))
    commands = {c.name for c in COMMANDS} - {"demo"}
    rng = random.Random(seed)
    problems: list[str] = []
    done = 0
    while done < count:
        argv = [rng.choice(words) for _ in range(rng.randint(1, 7))]
        if not commands & set(argv) or "-" in argv or "demo" in argv:
            continue  # the interactive mode; stdin; a demo writes a project
        if rng.random() < 0.5 and "--json" not in argv:
            argv.append("--json")
        done += 1
        result = cli(*argv, env=clean_env(**_ENV))
        asked = "--json" in argv[: argv.index("--") if "--" in argv else None]  # an option
        as_json = asked and result.out.lstrip()[:1] in ("{", "[")
        if asked and not as_json and not result.out.startswith("usage:"):
            problems.append(f"{argv}: --json printed {result.out[:80]!r}")
        reports = "doctor" in argv or "--verify" in argv or "--view" in argv
        problems += contract(result, argv, as_json=as_json, reports=reports)
    return problems


def test_random_command_lines_keep_the_contract(server: CliServer, tmp_path: Path) -> None:
    """Command lines drawn at random (a fixed seed) from commands, options and hostile values:
    each outcome keeps the contract."""
    assert [] == _sweep(server, tmp_path, seed=20261203, count=150)


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(8))
def test_random_command_lines_keep_the_contract_soak(
    server: CliServer, tmp_path: Path, seed: int
) -> None:
    """The random sweep, longer."""
    assert [] == _sweep(server, tmp_path, seed=seed, count=1000)


@pytest.mark.soak
def test_every_subcommand_into_head_exits_quietly(server: CliServer, tmp_path: Path) -> None:
    """A real shell pipeline, ``set -o pipefail; lite-agent ... | head -1``, for every
    subcommand: one line through, exit 0, nothing on stderr."""
    problems = []
    for n, (cmd, as_json) in enumerate(_variants()):
        cli = _case(server, tmp_path / f"c{n}")
        if cmd.setup:
            cmd.setup(cli, "s1")
        argv = cmd.line(cli, "s1") + (["--json"] if as_json else [])
        if cmd.model:
            argv = ["--provider", cli.script({"text": "ok\n" * 50_000}), *argv]
        base = [str(LITE_AGENT), "--workdir", str(cli.work), "--home", str(cli.home)]
        command = f"set -o pipefail; {shlex.join(base + argv)} | head -1"
        run = subprocess.run(
            ["/bin/bash", "-c", command],
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=120,
            check=False,
            cwd=cli.root,
        )
        if (run.returncode, run.stderr) != (0, "") or len(run.stdout.splitlines()) != 1:
            problems.append(f"{argv}: exit {run.returncode}, stderr {run.stderr!r}")
    assert [] == problems
