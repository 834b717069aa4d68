"""The README's examples run (they are files, executed here in a real interpreter)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _block_after(heading: str) -> str:
    """The first ```python block after ``heading`` in the README."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index(heading) :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```", start)]


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


def test_readme_snippet_runs(tmp_path: Path) -> None:
    """The README's first code block runs as written (with its folder moved into tmp)."""
    code = _block_after("## The event log in 30 lines")
    code = code.replace('"/tmp/demo-sessions"', repr(str(tmp_path / "sessions")))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert "'text': 'hello'" in result.stdout
    assert "'text': 'again'" in result.stdout


def test_readme_names_the_example() -> None:
    """The README points at the example file the tests run."""
    assert "examples/eventlog_quickstart.py" in (ROOT / "README.md").read_text()


def test_readme_fake_server_snippet_runs() -> None:
    """The README's fake-server example runs as written (given a request)."""
    code = _block_after("### Testing without a network")
    setup = (
        "from liteagent.eventlog import Message, TextBlock\n"
        "from liteagent.eventlog import ModelRequest\n"
        "request = ModelRequest(model='m', messages=(Message('user', (TextBlock('hi'),)),))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", setup + code + "\nprint(response.message.content)\n"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "TextBlock(text='hello'" in result.stdout


def test_readme_scripted_agent_runs() -> None:
    """The README's offline first agent runs: the real write_file tool and a scripted model."""
    code = _block_after("Without a network, drive the same agent")
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert "Created hello.py." == result.stdout.strip()


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
