"""``lite-agent`` against hostile input and surroundings, in real processes: damaged stores,
mistyped paths, closed streams, escape codes in paths the model chose, reserved ids."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
from _cli_runner import LITE_AGENT, Cli, clean_env, write
from test_cli_errors import assert_cli_words, assert_one_json_error

pytestmark = pytest.mark.processes

_ESC = "\x1b"


def _project(cli: Cli) -> Path:
    (project,) = (cli.home / "projects").iterdir()
    return project


def _one_session(cli: Cli, *extra: str) -> None:
    cli.ok(*extra, "run", "hi", "--session", "s1", provider=cli.script({"text": "ok"}))


# D4: doctor on a store that cannot be opened -----------------------------------------------


def test_doctor_reports_a_truncated_sqlite_store_as_a_finding(cli: Cli) -> None:
    """doctor on a truncated SQLite store exits 1 with one "corrupt" finding that does not advise
    running doctor; doctor --repair exits 1 saying "not repaired", with nothing on stderr."""
    _one_session(cli, "--backend", "sqlite")
    db = _project(cli) / "sessions.db"
    os.truncate(db, db.stat().st_size // 2)
    result = cli("--backend", "sqlite", "doctor", "--json")
    assert 1 == result.code, result
    doc = result.json()
    assert doc["ok"] is False
    assert ["corrupt"] == [f["kind"] for f in doc["findings"]]
    assert "cannot be opened" in doc["findings"][0]["detail"]
    assert "lite-agent doctor" not in doc["findings"][0]["detail"]  # no circular advice
    repair = cli("--backend", "sqlite", "doctor", "--repair")
    assert 1 == repair.code, repair
    assert "not repaired" in repair.out
    assert "None" not in repair.out
    assert "" == repair.err


@pytest.mark.parametrize("keep", [1, 64])
def test_a_sqlite_store_cut_below_a_header_is_reported_and_left_as_it_is(
    cli: Cli, keep: int
) -> None:
    """A SQLite store cut to a few bytes (SQLite would take one byte for an empty database):
    ``doctor`` reports it (exit 1), ``sessions`` and ``export`` refuse it, and none of them
    writes a new database over it."""
    _one_session(cli, "--backend", "sqlite")
    db = _project(cli) / "sessions.db"
    for side in (db.with_name("sessions.db-wal"), db.with_name("sessions.db-shm")):
        side.unlink(missing_ok=True)
    os.truncate(db, keep)
    before = db.read_bytes()
    result = cli("--backend", "sqlite", "doctor", "--json")
    assert 1 == result.code, result
    assert ["corrupt"] == [f["kind"] for f in result.json()["findings"]]
    assert f"holds {keep} bytes" in result.json()["findings"][0]["detail"]
    for argv in (["sessions", "--json"], ["export", "s1"], ["gc", "--dry-run"]):
        assert 0 != cli("--backend", "sqlite", *argv).code, argv
    assert before == db.read_bytes()


def test_doctor_reports_a_file_where_the_sessions_folder_should_be(cli: Cli) -> None:
    """A file where the sessions folder should be: doctor exits 1 with a "cannot be opened"
    finding, and no "Errno" in its output."""
    _one_session(cli)
    sessions = _project(cli) / "sessions"
    for path in sorted(sessions.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    sessions.rmdir()
    sessions.write_text("x")
    result = cli("doctor", "--json")
    assert 1 == result.code, result
    assert "cannot be opened" in result.json()["findings"][0]["detail"]
    assert "Errno" not in result.out


def test_damaged_store_advice_is_given_once(cli: Cli) -> None:
    """sessions on a truncated SQLite store is one "damaged" JSON error that names
    `lite-agent doctor` exactly once."""
    _one_session(cli, "--backend", "sqlite")
    db = _project(cli) / "sessions.db"
    os.truncate(db, db.stat().st_size // 2)
    error = assert_one_json_error(cli("--backend", "sqlite", "sessions", "--json"), 1, "damaged")
    assert 1 == error["message"].count("lite-agent doctor")


def test_doctor_on_no_store_creates_nothing(cli: Cli) -> None:
    """doctor with no store exits 0, reports that none exists, and creates no home folder."""
    result = cli("doctor", "--json")
    assert 0 == result.code, result
    assert result.json()["exists"] is False
    assert not cli.home.exists()


# D11: paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions", "--json"],
        ["checkpoints", "s1", "--json"],
        ["export", "s1", "--json"],
        ["replay", "s1", "--json"],
        ["doctor", "--json"],
    ],
)
def test_read_only_commands_create_no_store(cli: Cli, argv: list[str]) -> None:
    """Read-only commands on a --db in a missing folder, on a dangling symlink, or on no store
    exit 0 or 2 ("no session s1") and create no folder, symlink target or home."""
    db = cli.root / "typo" / "dir" / "x.db"
    dangling = cli.root / "link.db"
    dangling.symlink_to(cli.root / "target.db")
    for where in (db, dangling):
        result = cli("--backend", "sqlite", "--db", str(where), *argv)
        assert result.code in (0, 2), result
        if result.code == 2:
            assert "no session s1" in result.json()["error"]["message"]
    result = cli(*argv)
    assert result.code in (0, 2), result
    assert not (cli.root / "typo").exists()
    assert not (cli.root / "target.db").exists()
    assert not cli.home.exists()


def test_sessions_on_no_store_lists_none(cli: Cli) -> None:
    """sessions with no store lists an empty JSON array, and says "no sessions" as text."""
    assert [] == cli.ok("sessions", "--json").json()
    assert "no sessions" in cli.ok("sessions").out


@pytest.mark.parametrize(
    "argv",
    [
        ["--home", "", "sessions"],
        ["--db", "", "--backend", "sqlite", "sessions"],
        ["--workdir", "", "sessions"],
        ["import", ""],
        ["fork", "s1", "2", "--into", ""],
        ["demo", "--dir", ""],
    ],
)
def test_an_empty_path_is_a_usage_error(cli: Cli, argv: list[str]) -> None:
    """An empty --home, --db, --workdir, import file, fork --into or demo --dir is a JSON usage
    error (exit 2), and nothing is created in the current folder."""
    assert_one_json_error(cli.server.run(*argv, "--json", cwd=cli.root), 2, "usage")
    assert [] == sorted(p.name for p in cli.root.iterdir() if p.name != "work")


def test_a_file_as_home_or_db_is_a_usage_error(cli: Cli) -> None:
    """A file as --home, or a non-database file or a folder as --db, is a JSON usage error whose
    message has no "Errno" and no advice to run doctor."""
    file = cli.root / "file.txt"
    file.write_text("notadb\n")
    base = ["--workdir", str(cli.work)]
    for argv in (
        ["--home", str(file), "sessions"],
        ["--backend", "sqlite", "--db", str(file), "sessions"],
        ["--backend", "sqlite", "--db", str(cli.root), "sessions"],
    ):
        error = assert_one_json_error(cli.server.run(*base, *argv, "--json"), 2, "usage")
        assert "Errno" not in error["message"]
        assert "doctor" not in error["message"]


def test_option_abbreviations_are_refused(cli: Cli) -> None:
    """An abbreviated option (--js for --json) exits 2 as an unrecognized argument."""
    result = cli("sessions", "--js")
    assert 2 == result.code, result
    assert "unrecognized arguments: --js" in result.err


def test_undo_of_a_branch_that_is_not_there_is_a_usage_error(cli: Cli) -> None:
    """restore --undo of a branch that does not exist is a JSON usage error naming the branch."""
    _one_session(cli)
    error = assert_one_json_error(
        cli("restore", "--undo", "s1", "--branch", "nosuch", "--json"), 2, "usage"
    )
    assert "nosuch" in error["message"]


# D2: a damaged session in the listing ----------------------------------------------------


def test_sessions_lists_a_damaged_session_as_damaged(cli: Cli) -> None:
    """A session log of random bytes is listed beside the sound one, with no event count and
    marked damaged, in JSON and in text."""
    _one_session(cli)
    (_project(cli) / "sessions" / "junk.log").write_bytes(os.urandom(100))
    listed = {s["id"]: s for s in cli.ok("sessions", "--json").json()}
    assert listed["s1"]["events"] > 0
    assert listed["junk"]["events"] is None
    assert listed["junk"]["damaged"]
    text = cli.ok("sessions").out
    assert "junk" in text
    assert "damaged" in text


def test_a_salvaged_empty_session_is_listed_nowhere(cli: Cli) -> None:
    """After doctor --repair salvages a session of random bytes, sessions lists it exactly when
    checkpoints can open it."""
    _one_session(cli)
    (_project(cli) / "sessions" / "junk.log").write_bytes(os.urandom(100))
    cli("doctor", "--repair")  # salvages junk: it keeps no events
    ids = [s["id"] for s in cli.ok("sessions", "--json").json()]
    exists = cli("checkpoints", "junk", "--json").code == 0
    assert ("junk" in ids) == exists


# D3: a closed stdin -------------------------------------------------------------------------


def _closed_stdin(cli: Cli, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LITE_AGENT, "--workdir", str(cli.work), "--home", str(cli.home), *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=clean_env(),
        preexec_fn=lambda: os.close(0),
        timeout=30,
        check=False,
    )


def test_import_from_a_closed_stdin(cli: Cli) -> None:
    """import - with stdin closed exits 1 with a JSON error saying there are no messages, not an
    internal error."""
    done = _closed_stdin(cli, "import", "-", "--json")
    assert 1 == done.returncode, done
    assert "internal error" not in done.stdout
    assert "no messages" in json.loads(done.stdout)["error"]["message"]


def test_interactive_with_a_closed_stdin_ends(cli: Cli) -> None:
    """The interactive mode with stdin closed exits 0 without an internal error."""
    done = _closed_stdin(cli, "--provider", cli.script({"text": "ok"}))
    assert 0 == done.returncode, done
    assert "internal error" not in done.stdout + done.stderr


# D8: a refused restore prints nothing on stdout -------------------------------------------


def test_a_refused_restore_prints_nothing_on_stdout(cli: Cli) -> None:
    """A restore refused over a user's edit exits 1, prints nothing on stdout, and says "refused"
    on stderr."""
    cli.ok(
        "run",
        "one",
        "--session",
        "s1",
        provider=cli.script(write("a.py", "1\n"), {"text": "ok"}),
    )
    with (cli.work / "a.py").open("a") as f:
        f.write("user edit\n")
    result = cli("restore", "s1", "2")
    assert 1 == result.code, result
    assert "" == result.out
    assert "refused" in result.err


# D10: the reader of a streamed run goes away -----------------------------------------------


def test_run_into_a_closed_pipe_ends_quietly(cli: Cli) -> None:
    """A streamed run whose reader closes stdout after one byte exits 0 with nothing on stderr."""
    provider = cli.script({"text": "word " * 20000})
    argv = ["--workdir", str(cli.work), "--home", str(cli.home), "--provider", provider]
    proc = subprocess.Popen(
        [LITE_AGENT, *argv, "run", "go"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.read(1)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert 0 == proc.wait(30)
    assert "" == err


# D1: escape codes in what the model chose, and in arguments ------------------------------


def test_paths_with_escape_codes_are_shown_printable(cli: Cli) -> None:
    """A file path with escape codes chosen by the model is shown with ^[ by replay; checkpoints,
    restore (dry run and real), replay and branches exit 0 and write no raw escape."""
    path = f"{_ESC}[31mRED{_ESC}[0m.py"
    cli.ok(
        "run",
        "p1",
        "--session",
        "e1",
        provider=cli.script(write(path, "x\n"), {"text": "ok"}),
    )
    assert "^[[31mRED" in cli.ok("replay", "e1").out
    for argv in (
        ["checkpoints", "e1"],
        ["restore", "e1", "2", "--dry-run"],
        ["replay", "e1"],
        ["restore", "e1", "2"],
        ["branches", "e1"],
    ):
        result = cli(*argv)
        assert 0 == result.code, (argv, result)
        assert _ESC not in result.out + result.err, argv


def test_arguments_with_escape_codes_are_echoed_printable(cli: Cli) -> None:
    """A session id or LITE_AGENT_LOG_LEVEL holding an escape code is refused (exit 2) without a
    raw escape on stderr."""
    result = cli("checkpoints", f"{_ESC}[2J")
    assert 2 == result.code, result
    assert _ESC not in result.err
    logged = cli("sessions", env=clean_env(LITE_AGENT_LOG_LEVEL=f"{_ESC}[2J"))
    assert 2 == logged.code, logged
    assert _ESC not in logged.err


# D9: a failed run names the session it left -----------------------------------------------


def test_a_failed_run_names_the_new_session(cli: Cli) -> None:
    """A run without --session that fails on the model names the session it created (JSON
    session_id and message, "(session " in text); with --session given, no session_id."""
    provider = cli.script({"error": "overloaded"})
    error = assert_one_json_error(cli("run", "go", "--json", provider=provider), 1, "model")
    sid = error["session_id"]
    assert sid in error["message"]
    assert [sid] == [s["id"] for s in cli.ok("sessions", "--json").json()]
    text = cli("run", "go", provider=cli.script({"error": "overloaded"}))
    assert 1 == text.code
    assert "(session " in text.err
    given = assert_one_json_error(
        cli("run", "go", "--session", "s9", "--json", provider=provider), 1, "model"
    )
    assert "session_id" not in given


# D5: reserved branch ids ------------------------------------------------------------------


def test_import_refuses_a_branch_id(cli: Cli) -> None:
    """import into a reserved branch id (branch..mine) is a JSON usage error naming the branch,
    and no session is created."""
    (cli.root / "t.jsonl").write_text('{"role":"user","content":"hi"}\n')
    error = assert_one_json_error(
        cli("import", str(cli.root / "t.jsonl"), "--session", "branch..mine", "--json"),
        2,
        "usage",
    )
    assert "branch" in error["message"]
    assert not cli.home.exists() or [] == cli.ok("sessions", "--json").json()


def test_commands_refuse_a_branch_id_in_cli_words(cli: Cli) -> None:
    """checkpoints and run refuse a branch id as a JSON usage error; the text message is in CLI
    words (no list_branches(), no exception class name or traceback)."""
    _one_session(cli)
    for argv in (["checkpoints", "branch..x"], ["run", "hi", "--session", "branch..x"]):
        assert_one_json_error(cli(*argv, "--json"), 2, "usage")
        result = cli(*argv)
        assert "list_branches()" not in result.err
        assert_cli_words(result.err)


# D6: a damaged mtime ----------------------------------------------------------------------


def test_a_non_finite_mtime_is_unknown(cli: Cli) -> None:
    """A session whose stored mtime is infinite is listed with mtime null in JSON and "unknown"
    in text."""
    _one_session(cli, "--backend", "sqlite")
    with sqlite3.connect(_project(cli) / "sessions.db") as db:
        db.execute("UPDATE sessions SET mtime = 1e308 * 10")
    listed = cli.ok("--backend", "sqlite", "sessions", "--json").json()
    assert [None] == [s["mtime"] for s in listed]
    text = cli("--backend", "sqlite", "sessions")
    assert 0 == text.code, text
    assert "unknown" in text.out


# D7: OS errors and library words -----------------------------------------------------------


def test_storage_errors_are_in_plain_words(cli: Cli) -> None:
    """sessions over a file where the sessions folder should be is a JSON "io" error (exit 1)
    whose message has no "Errno"."""
    _one_session(cli)
    sessions = _project(cli) / "sessions"
    for path in sorted(sessions.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    sessions.rmdir()
    sessions.write_text("x")
    error = assert_one_json_error(cli("sessions", "--json"), 1, "io")
    assert "Errno" not in error["message"]


def test_failure_messages_use_cli_words() -> None:
    """cli_words turns an SDK message into CLI words: no exception class name, and
    --conversation-only and lite-agent branches where the SDK's calls were."""
    from liteagent.sdk._cli_errors import cli_words

    said = cli_words(
        "damaged (CorruptBlobError: blob x is damaged); restore with files=False to go on; "
        "list_branches() and undo_restore() bring it back"
    )
    assert_cli_words(said)
    assert "--conversation-only" in said
    assert "lite-agent branches" in said
