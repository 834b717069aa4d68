"""The README's examples run: every ```python block of README.md is a file under examples/, run
here in a real interpreter, offline.

A block that is a whole program is the whole file. A fragment (calls on an ``agent`` it does
not make) sits in a file that sets up what it names, between the lines ``# The README's block``
and ``# (end of the README's block)``, and checks the outcome after them. The blocks that call
Claude run as written against the fake Messages API server: ``anthropic()`` takes
``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY`` from the environment, as the README says.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from _postgres_server import Server

from liteagent.eventlog import file_checkpointer, postgres_checkpointer, sqlite_checkpointer
from liteagent.eventlog.conformance import (
    CheckpointerConformance,
    CrashConformance,
    DurableConformance,
    prompts,
    texts,
)
from liteagent.eventlog.types import UserPrompt
from liteagent.providers.testing import FakeMessagesServer, message, text, tool_use

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BEGIN = "# The README's block"
END = "# (end of the README's block)\n"

# examples/session_files_conformance.py imports the example backend by its module name.
sys.path.append(str(EXAMPLES))

_T = TypeVar("_T", bound=Callable[..., None])
RUN: set[str] = set()
"""The example files a test in this module runs (see :func:`runs`)."""

_WITHHELD = frozenset(
    {"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "DATABASE_URL"}
)


def runs(name: str) -> Callable[[_T], _T]:
    """Mark a test as the one that runs ``examples/<name>``."""

    def register(test: _T) -> _T:
        RUN.add(name)
        return test

    return register


def readme_blocks() -> list[tuple[int, str]]:
    """Every ```python block of the README: its first line's number and its code."""
    readme = (ROOT / "README.md").read_text()
    return [
        (readme.count("\n", 0, m.start(1)) + 1, m.group(1))
        for m in re.finditer(r"^```python\n(.*?)^```$", readme, re.DOTALL | re.MULTILINE)
    ]


def readme_part(path: Path) -> str:
    """What of an example file the README shows: between the markers, or the whole file."""
    code = path.read_text()
    if BEGIN not in code:
        return code
    start = code.index("\n", code.index(BEGIN)) + 1
    return code[start : code.index(END, start)]


def run_example(name: str, cwd: Path, **env: str) -> str:
    """Run ``examples/<name>`` in a fresh interpreter in ``cwd`` with temp files, the lite-agent
    home and ``env`` under ``cwd``'s parent (no key, URL or DSN of the caller's); its stdout."""
    cwd.mkdir(exist_ok=True)
    environment = {k: v for k, v in os.environ.items() if k not in _WITHHELD}
    environment |= {
        "TMPDIR": str(cwd.parent),
        "LITE_AGENT_HOME": str(cwd.parent / "home"),
        "NO_PROXY": "127.0.0.1",
        "no_proxy": "127.0.0.1",
        **env,
    }
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == result.returncode, result.stderr
    return result.stdout


def claude(fake: FakeMessagesServer) -> dict[str, str]:
    """The environment that points ``anthropic()`` at the fake server."""
    return {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake.base_url}


def stored_prompts(store_path: Path) -> dict[str, list[str]]:
    """The user prompts of every session of the SQLite store at ``store_path``."""
    with sqlite_checkpointer(store_path) as cp:
        return {
            info.id: [e.body.text for e in cp.read(info.id) if isinstance(e.body, UserPrompt)]
            for info in cp.list()
        }


def test_every_readme_block_is_an_example_a_test_runs() -> None:
    """Each python block of the README is what exactly one file under examples/ shows, and a
    test here runs that file."""
    parts = {p.name: readme_part(p) for p in sorted(EXAMPLES.glob("*.py"))}
    blocks = readme_blocks()
    files = {line: [name for name, part in parts.items() if part == code] for line, code in blocks}
    unmatched = {line: names for line, names in files.items() if len(names) != 1}
    unrun = {line: names for line, names in files.items() if not set(names) <= RUN}
    assert ({}, {}) == (unmatched, unrun)
    assert 18 <= len(blocks)


def test_readme_names_the_example() -> None:
    """The README points at the example files the tests run."""
    readme = (ROOT / "README.md").read_text()
    assert ["examples/eventlog_quickstart.py", "examples/time_travel.py"] == [
        name
        for name in ("examples/eventlog_quickstart.py", "examples/time_travel.py")
        if name in readme
    ]


# -- the README's blocks, in the README's order --------------------------------------------------


@runs("first_agent.py")
def test_first_agent_with_claude(tmp_path: Path) -> None:
    """The first agent, with Claude: the model's edit lands in utils.py, and the result prints
    the model's text, its usage and its stop reason."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "utils.py").write_text("def add(a, b):\n    return a + b\n")
    edit = {
        "path": "utils.py",
        "old_string": "def add(a, b):\n",
        "new_string": 'def add(a, b):\n    """Return a + b."""\n',
    }
    with FakeMessagesServer() as fake:
        fake.add(
            message([tool_use("toolu_1", "edit_file", edit)]),
            message([text("Added a docstring to add().")]),
        )
        out = run_example("first_agent.py", work, **claude(fake))
        requests = fake.requests
    assert (
        'def add(a, b):\n    """Return a + b."""\n    return a + b\n'
        == (work / "utils.py").read_text()
    )
    assert out.startswith("Added a docstring to add(). Usage(")
    assert out.endswith(" end_turn\n")
    assert [("claude-sonnet-4-5", "Add a docstring to every function in utils.py")] * 2 == [
        (r.body["model"], r.body["messages"][0]["content"][0]["text"]) for r in requests
    ]


@runs("first_agent_offline.py")
def test_first_agent_offline(tmp_path: Path) -> None:
    """The offline first agent: the real write_file tool wrote hello.py in a new temp folder,
    and the scripted model's last text is printed."""
    out = run_example("first_agent_offline.py", tmp_path / "cwd")
    assert "Created hello.py.\n" == out
    assert ["print('hi')\n"] == [p.read_text() for p in tmp_path.glob("*/hello.py")]


@runs("sessions.py")
def test_sessions_block(tmp_path: Path) -> None:
    """The Sessions calls: resume and clear leave stored sessions alone, delete_session removes
    one, and the current session is a new one."""
    out = run_example("sessions.py", tmp_path / "cwd")
    assert [
        "stored before: True",
        "stored after: ['kept']",
        "current is new: True",
        "background tasks: []",
    ] == out.splitlines()[-4:]


@runs("hosting.py")
def test_hosting_with_claude(tmp_path: Path) -> None:
    """Hosting many sessions: both prompts ran as sessions of their own in sessions.db, and the
    host's stats are printed."""
    with FakeMessagesServer() as fake:
        fake.add(message([text("Done.")]), message([text("Done.")]))
        out = run_example("hosting.py", tmp_path / "work", **claude(fake))
    assert out.startswith("HostStats(live=")
    assert out.endswith(
        ", max_live_sessions=256, max_queued_sends=10000, max_background_tasks=64, "
        "operations=0, queued_operations=0, max_operations=8)\n"
    )
    assert {"fix-tests": ["Make the tests pass"], "docs": ["Document utils.py"]} == stored_prompts(
        tmp_path / "work" / "sessions.db"
    )


@runs("async_agent.py")
def test_async_agent_with_claude(tmp_path: Path) -> None:
    """The async agent: three sends at once, one session each (named after its file) in the
    default store, and their texts printed."""
    with FakeMessagesServer() as fake:
        fake.add(*(message([text("A summary.")]) for _ in range(3)))
        out = run_example("async_agent.py", tmp_path / "work", **claude(fake))
        asked = sorted(r.body["messages"][0]["content"][0]["text"] for r in fake.requests)
    assert "['A summary.', 'A summary.', 'A summary.']\n" == out
    assert ["Summarize a.py", "Summarize b.py", "Summarize c.py"] == asked
    with file_checkpointer(workdir=tmp_path / "work", home=tmp_path / "home") as cp:
        assert ["a.py", "b.py", "c.py"] == sorted(s.id for s in cp.list())


@runs("time_travel_restore.py")
def test_time_travel_block(tmp_path: Path) -> None:
    """Time travel: the restores put files back in two sessions, files only and conversation
    only, and each session's conversation ends where it should."""
    out = run_example("time_travel_restore.py", tmp_path / "cwd")
    assert [
        "restored: ('extra.txt',) True",
        "notes.txt: v1",
        "extra.txt: None",
        "other.txt: v1",
        "conversation: ['create notes.txt']",
        "other conversation: ['create other.txt']",
    ] == out.splitlines()[-6:]


@runs("time_travel_preview.py")
def test_restore_preview_block(tmp_path: Path) -> None:
    """The preview: the edit it would undo, the shell command it cannot, and nothing changed."""
    out = run_example("time_travel_preview.py", tmp_path / "cwd")
    [side_effect] = [line for line in out.splitlines() if " bash " in line]
    assert " bash echo started > log.txt exit code 0 0" in side_effect
    assert [
        "changes: [('app.py', 'overwrite', 1, 1)]",
        "refused: []",
        "events removed: True",
        "side effects after each checkpoint: [1, 1]",
        "app.py still: print('v2')",
    ] == out.splitlines()[-5:]


@runs("time_travel_undo.py")
def test_undo_block(tmp_path: Path) -> None:
    """Undo: restore, undo, undo the undo, then undo a chosen branch: back to the state before
    the restore."""
    out = run_example("time_travel_undo.py", tmp_path / "cwd")
    assert [
        "the restore's branch: True",
        "after three undos: app.py v2, prompts ['create app.py', 'make it v2']",
        "branches: [('undo', True)]",
    ] == out.splitlines()


@runs("time_travel_fork.py")
def test_fork_block(tmp_path: Path) -> None:
    """Fork: the fork continues from before the checkpoint, the original is untouched, and the
    copy of the workspace gets the file as it was then."""
    out = run_example("time_travel_fork.py", tmp_path / "cwd")
    assert [
        "fork: ['create app.py', 'try it another way']",
        "original: ['create app.py', 'make it v2']",
        "workspace app.py: v2",
        "copy app.py: v1",
        "sessions: 3",
    ] == out.splitlines()


@runs("garbage_collection.py")
def test_garbage_collection_block(tmp_path: Path) -> None:
    """Garbage collection: nothing referenced goes; after delete_session the next collection
    frees the session's blobs."""
    out = run_example("garbage_collection.py", tmp_path / "cwd")
    assert [
        "within the grace period: 0 deleted, 0 young",
        "after the delete: True deleted; sessions: []",
    ] == out.splitlines()


@runs("compaction_middleware.py")
def test_compaction_middleware_block(tmp_path: Path) -> None:
    """Context compaction middleware: a large tool result reaches the model as a spill marker,
    and the agent got the context tool to read it with."""
    out = run_example("compaction_middleware.py", tmp_path / "cwd")
    assert (
        "spilled: True; tools: ['bash', 'context', 'delete_file', 'edit_file', 'glob', 'grep', "
        "'read_file', 'write_file']\n"
    ) == out


@runs("context_options.py")
def test_context_options_block(tmp_path: Path) -> None:
    """ContextOptions: the engine projected the request for the budget given."""
    out = run_example("context_options.py", tmp_path / "cwd")
    assert ["hello", "context_status: level none budget 120000"] == out.splitlines()


@runs("verify_replay.py")
def test_verify_replay_block(tmp_path: Path) -> None:
    """verify_replay: every request of a session with a tool call is recomputed to its hash."""
    out = run_example("verify_replay.py", tmp_path / "cwd")
    assert "verified: 3 requests, levels ['none', 'none', 'none']\n" == out


@runs("eventlog_in_30_lines.py")
def test_eventlog_in_30_lines(tmp_path: Path) -> None:
    """The event log in 30 lines: both prompts fold into the conversation, and the truncate
    leaves the first event only."""
    out = run_example("eventlog_in_30_lines.py", tmp_path / "cwd")
    assert (
        "[{'role': 'user', 'content': [{'type': 'text', 'text': 'hello'}, "
        "{'type': 'text', 'text': 'again'}]}]\n"
    ) == out
    [folder] = [p.parent for p in tmp_path.glob("*/s1.log")]
    with file_checkpointer(folder) as cp:
        assert ["hello"] == texts(cp.read("s1"))


@runs("postgres_agent.py")
def test_postgres_agent_with_claude(postgres_server: Server, tmp_path: Path) -> None:
    """PostgreSQL: the agent's session is stored in the server's schema ``liteagent``."""
    psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'liteagent'").fetchone():
            pytest.skip("the test database has a schema liteagent of its own: left alone")
    try:
        with FakeMessagesServer() as fake:
            fake.add(message([text("Hello from Claude.")]))
            out = run_example(
                "postgres_agent.py",
                tmp_path / "work",
                DATABASE_URL=postgres_server.dsn,
                **claude(fake),
            )
        with postgres_checkpointer(postgres_server.dsn, schema="liteagent") as cp:
            [session] = cp.list()
            kinds = [e.kind for e in cp.read(session.id)]
    finally:
        with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS liteagent CASCADE")
    assert out.startswith("Hello from Claude.\nstored: ")
    assert f"stored: {kinds}\n" == out.splitlines(keepends=True)[1]
    assert {"user_prompt", "assistant_message"} <= set(kinds)


@runs("session_files_conformance.py")
def test_conformance_block_is_the_suite_the_example_backend_passes(tmp_path: Path) -> None:
    """The conformance block declares the three suites on the example backend; its factory
    opens that backend, and tests/test_backend_example.py runs the suites through it."""
    readme = importlib.import_module("session_files_conformance")
    suites = readme.TestSessionFilesCheckpointer
    assert (CheckpointerConformance, DurableConformance, CrashConformance) == suites.__bases__
    with suites().checkpointer_factory(tmp_path)() as cp:
        cp.append("s", prompts("a"))
        assert ["a"] == texts(cp.read("s"))
    backend_tests = importlib.import_module("test_backend_example")
    assert issubclass(backend_tests.TestSessionFilesCheckpointer, suites)


@runs("claude_stream.py")
def test_claude_stream(tmp_path: Path) -> None:
    """Claude's stream: the text deltas print as they come, from a request with the system
    prompt, the bash tool and the token limit."""
    with FakeMessagesServer() as fake:
        fake.add(message([text("main.py and utils.py")]))
        out = run_example("claude_stream.py", tmp_path / "cwd", **claude(fake))
        [request] = fake.requests
    assert "main.py and utils.py" == out
    body = request.body
    assert ("claude-sonnet-4-5", 4096, True, ["bash"]) == (
        body["model"],
        body["max_tokens"],
        body["stream"],
        [t["name"] for t in body["tools"]],
    )
    assert "You are a careful coding agent." in str(body["system"])


@runs("fake_server.py")
def test_fake_server_block(tmp_path: Path) -> None:
    """The fake server: the overloaded answer is retried, and the message arrives."""
    out = run_example("fake_server.py", tmp_path / "cwd")
    assert "(TextBlock(text='hello', extra=UNSET),)\n" == out


# -- longer examples the README names -------------------------------------------------------------


@runs("eventlog_quickstart.py")
@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_quickstart_runs(tmp_path: Path, backend: str) -> None:
    """examples/eventlog_quickstart.py runs and shows the restore and the refused stale writer."""
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "eventlog_quickstart.py"),
            "--backend",
            backend,
            "--root",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert (
        "after restore: ['session_started', 'user_prompt', 'assistant_message', "
        "'tool_result']" in result.stdout
    )
    assert "stale writer refused" in result.stdout
    assert "integrity: True sessions: ['demo']" in result.stdout


@runs("time_travel.py")
def test_time_travel_example_runs() -> None:
    """examples/time_travel.py refuses over a user's edit, previews, restores files and
    conversation, and undoes the restore."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "time_travel.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "refused: [('app.py'" in result.stdout
    assert "restored: ['app.py', 'notes.md']" in result.stdout
    assert "app.py: print('v1')" in result.stdout
    assert "notes.md back: True" in result.stdout
    assert "conversation: ['create app.py']" in result.stdout
    assert "would put back: [('app.py', 'overwrite'), ('notes.md', 'create')]" in result.stdout
    assert "after undo, app.py: print('v2')" in result.stdout
    assert (
        "after undo, conversation: ['create app.py', 'make it v2', 'remove the notes']"
        in result.stdout
    )
