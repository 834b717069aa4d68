"""The installed ``lite-agent`` script: the offline demo from start to end, and the interactive
mode driven by real key presses in a pseudo-terminal (line editing, history across runs,
slash commands, Ctrl-C during a slow scripted turn and a compaction, two Ctrl-C at the prompt
to quit, Ctrl-D), with colour only where it belongs and no escape codes on ``TERM=dumb``."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _cli_runner import LITE_AGENT, Terminal, clean_env, write, write_script

from liteagent.eventlog import file_checkpointer, project_dir
from liteagent.eventlog.types import UserPrompt

pytestmark = pytest.mark.processes

_COLOUR = re.compile(r"\x1b\[[0-9;]*(?:3[0-9]|9[0-7]|38;[0-9;]+)m")  # a foreground colour


def test_the_demo_runs_offline_and_its_restore_changed_the_files_back(tmp_path: Path) -> None:
    """The demo ends with exit 0; the files are as the restore and the later prompt left them;
    its compaction summarized with the instructions and its progress never went back; its
    output (a pipe) holds no escape code; the replay command it prints verifies every
    request."""
    demo = tmp_path / "demo"
    run = subprocess.run(
        [str(LITE_AGENT), "demo", "--dir", str(demo)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )
    assert 0 == run.returncode, run.stderr
    out = run.stdout
    for step in (
        "checkpoints (one per prompt)",
        "restore to seq",
        "compaction (the log keeps",
        "the log",
    ):
        assert step in out
    assert "\x1b" not in out
    assert "calc.py has subtract(): False" in out
    assert "older turns summarized by the model, with the instructions" in out
    percents = [int(p) for p in re.findall(r"  compact\w* \w+ (\d+)%", out)]
    assert percents
    assert sorted(percents) == percents
    assert 100 == percents[-1]
    project = demo / "project"
    calc = (project / "calc.py").read_text()
    assert "def multiply" in calc
    assert "def subtract" not in calc  # the restore undid the edit
    assert (project / "NOTES.md").exists()  # the restore brought the deleted file back
    assert not (project / "README.md").exists()  # and removed the one created after
    assert "from calc import add\n" in (project / "check.py").read_text()
    [command] = [
        line.strip()
        for line in out.splitlines()
        if line.strip().startswith("lite-agent ")
        and line.strip().endswith(tuple("0123456789abcdef"))
    ]
    argv = shlex.split(command)
    verify = subprocess.run(
        [str(LITE_AGENT), *argv[1:], "--verify"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )
    assert 0 == verify.returncode, verify.stderr
    assert re.search(
        r"(\d+) of \1 recorded requests recomputed from the log exactly", verify.stdout
    )


def start(
    tmp_path: Path,
    responses: list[dict[str, Any]],
    **env: str,
) -> tuple[Terminal, Path, Path]:
    """``lite-agent`` on an empty workspace with a scripted model, in a terminal."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir(parents=True, exist_ok=True)
    provider = write_script(tmp_path / "script.json", responses)
    term = Terminal(
        [str(LITE_AGENT), "--workdir", str(work), "--home", str(home), "--provider", provider],
        clean_env(**{"TERM": "xterm-256color", **env}),
    )
    return term, work, home


def test_turns_ctrl_c_and_restore_in_a_terminal(tmp_path: Path) -> None:
    """A streamed turn with a tool call; Ctrl-C cancels a slow turn (the log records it and the
    session continues); a restore with its progress bar and a refusal in CLI words; two Ctrl-C
    at the prompt quit with exit code 0."""
    term, work, home = start(
        tmp_path,
        [
            write("a.txt", "one\n", say="Writing."),
            {"text": "Wrote a.txt."},
            {"text": "too late", "delay": 60},
            write("b.txt", "two\n"),
            {"text": "Back."},
        ],
    )
    try:
        sid = term.expect(r"session (\S+)\n").group(1)
        term.expect("> ")
        term.type("hello\r")
        term.expect(r"Writing\.\n  → write_file a\.txt\nWrote a\.txt\.")
        term.expect("> ")
        term.type("take your time\r")
        time.sleep(0.5)
        term.type("\x03")
        term.expect("cancelled: the log records the aborted turn")
        term.expect("> ")
        term.type("after\r")
        term.expect(r"→ write_file b\.txt\nBack\.")
        term.expect("> ")
        term.type("/checkpoints\r")
        seq = term.expect(r"\n\s*(\d+)\s+\S+ \S+\s+after").group(1)
        term.expect("> ")
        term.type(f"/restore {seq}\r")
        term.expect(r"restore done: 1 files put back ━+ 100%")
        term.expect(f"restored to before seq {seq}: b.txt put back")
        term.expect("> ")
        term.type("/restore 999\r")
        term.expect("seq 999 is not a checkpoint of this session")
        term.expect("> ")
        term.type("\x03")
        term.expect("Ctrl-C again to quit")
        term.expect("> ")
        term.type("\x03")
        assert 0 == term.wait()
    finally:
        term.close()
    assert "Error" not in term.seen  # no exception class names
    assert (work / "a.txt").exists()
    assert not (work / "b.txt").exists()
    with file_checkpointer(workdir=work, home=home) as cp:
        kinds = [e.kind for e in cp.read(sid)]
        prompts = [e.body.text for e in cp.read(sid) if isinstance(e.body, UserPrompt)]
    assert "turn_aborted" in kinds
    assert ["hello", "take your time"] == prompts


def test_two_quick_ctrl_c_at_the_prompt_quit(tmp_path: Path) -> None:
    """Two Ctrl-C typed at once (the second arrives while the first is being handled) quit
    with exit code 0 and no traceback."""
    term, _, _ = start(tmp_path, [])
    try:
        term.expect("> ")
        term.type("\x03\x03")
        assert 0 == term.wait()
    finally:
        term.close()
    assert "Traceback" not in term.seen


def test_ctrl_c_then_a_line_resets_the_count(tmp_path: Path) -> None:
    """Ctrl-C at the prompt, then a line: the next single Ctrl-C only warns again."""
    term, _, _ = start(tmp_path, [])
    try:
        term.expect("> ")
        term.type("\x03")
        term.expect("Ctrl-C again to quit")
        term.expect("> ")
        term.type("/help\r")
        term.expect("compaction cancels it")
        term.expect("> ")
        term.type("\x03")
        term.expect("Ctrl-C again to quit")
        term.expect("> ")
        term.type("\x04")
        assert 0 == term.wait()
    finally:
        term.close()


def test_ctrl_c_on_a_typed_line_drops_it(tmp_path: Path) -> None:
    """Ctrl-C with text typed drops the line without counting toward quitting: a new prompt,
    no hint; then two Ctrl-C at the empty prompt quit."""
    term, _, _ = start(tmp_path, [])
    try:
        term.expect("> ")
        term.type("/help")
        term.expect("/help")
        term.type("\x03")
        term.expect("\n> ")
        term.type("\x03")
        term.expect("Ctrl-C again to quit")
        term.type("\x03")
        assert 0 == term.wait()
    finally:
        term.close()
    assert "compaction cancels it" not in term.seen  # the dropped /help never ran
    assert 1 == term.seen.count("Ctrl-C again to quit")


def test_slash_commands_in_a_terminal(tmp_path: Path) -> None:
    """/help, /compact with progress, /clear, /sessions, /resume, an unknown command, /exit."""
    term, _, _ = start(tmp_path, [{"text": f"Answer {i}."} for i in range(3)])
    try:
        sid = term.expect(r"session (\S+)\n").group(1)
        term.type("/help\r")
        term.expect(r"/restore <seq> \[--conversation-only\]")
        for i in range(3):
            term.type(f"question {i}\r")
            term.expect(f"Answer {i}.")
        term.type("/compact\r")
        term.expect(r"compaction done")
        term.expect(r"compacted: |nothing to reduce")
        term.type("/clear\r")
        other = term.expect(r"new session (\S+)").group(1)
        assert sid != other
        term.type("/sessions\r")
        term.expect(sid)
        term.type(f"/resume {sid}\r")
        term.expect(f"resumed {sid}")
        term.type("/nope\r")
        term.expect("unknown command /nope")
        term.type("/exit\r")
        assert 0 == term.wait()
    finally:
        term.close()


_HELP_THEN_PROMPT = r"/restore <seq> \[--conversation-only\][\s\S]*?compaction cancels it\.\n> "


def test_the_prompt_edits_lines_and_keeps_history_across_runs(tmp_path: Path) -> None:
    """A line fixed with the arrow keys runs as edited; the next run of lite-agent on the same
    project recalls it with the up arrow; the history file holds the edited line."""
    term, work, home = start(tmp_path, [])
    try:
        term.expect("> ")
        term.type("/hep\x1b[Dl\r")  # "/hep", left arrow, "l": "/help"
        term.expect(_HELP_THEN_PROMPT)
        term.type("/exit\r")
        assert 0 == term.wait()
    finally:
        term.close()
    history = project_dir(work, home) / "prompt_history"
    assert ["/help", "/exit"] == history.read_text().splitlines()[-2:]
    again, _, _ = start(tmp_path, [])
    try:
        again.expect("> ")
        again.type("\x1b[A\x1b[A\r")  # up twice: "/help" from the first run
        again.expect(_HELP_THEN_PROMPT)
        again.type("\x04")  # Ctrl-D at the empty prompt
        assert 0 == again.wait()
    finally:
        again.close()
    assert ["/help", "/exit", "/help"] == history.read_text().splitlines()


def test_an_unusable_history_file_leaves_the_prompt_working(tmp_path: Path) -> None:
    """A folder where the history file goes can be neither read nor written: the prompt still
    works and the CLI exits with 0 (history is a convenience, never a reason to fail)."""
    work, home = tmp_path / "work", tmp_path / "home"
    history = project_dir(work, home) / "prompt_history"
    history.mkdir(parents=True)
    term, _, _ = start(tmp_path, [])
    try:
        term.expect("> ")
        term.type("/help\r")
        term.expect(_HELP_THEN_PROMPT)
        term.type("/exit\r")
        assert 0 == term.wait()
    finally:
        term.close()
    assert history.is_dir()
    assert "Traceback" not in term.seen


def test_colour_on_a_terminal_and_none_with_no_color(tmp_path: Path) -> None:
    """On a colour terminal a tool call's line is coloured; with NO_COLOR set the same session
    writes no colour code at all."""
    outputs = []
    for name, env in (("colour", {}), ("plain", {"NO_COLOR": "1"})):
        term, _, _ = start(tmp_path / name, [write("a.txt", "x"), {"text": "Done."}], **env)
        try:
            term.expect("> ")
            term.type("go\r")
            term.expect("Done.")
            term.expect("> ")
            term.type("/exit\r")
            assert 0 == term.wait()
        finally:
            term.close()
        outputs.append(term.raw)
    coloured, plain = outputs
    assert _COLOUR.search(coloured)
    assert "→ write_file a.txt" in plain
    assert not _COLOUR.search(plain)


def test_a_dumb_terminal_gets_no_escape_codes(tmp_path: Path) -> None:
    """With TERM=dumb: a turn with a tool call, a restore with its progress, Ctrl-C during a
    turn and two Ctrl-C at the prompt all work, and not one escape code is written."""
    term, work, _ = start(
        tmp_path,
        [
            write("a.txt", "one\n"),
            {"text": "Wrote."},
            {"text": "too late", "delay": 60},
        ],
        TERM="dumb",
    )
    try:
        term.expect("> ")
        term.type("hello\r")
        term.expect("Wrote.")
        term.expect("> ")
        term.type("/checkpoints\r")
        seq = term.expect(r"\n\s*(\d+)\s+\S+ \S+\s+hello").group(1)
        term.expect("> ")
        term.type(f"/restore {seq}\r")
        term.expect(r"restoring 1/1 files 100%")
        term.expect("restored to before seq")
        term.expect("> ")
        term.type("slow\r")
        time.sleep(0.5)
        term.type("\x03")
        term.expect("cancelled: ")
        term.expect("> ")
        term.type("\x03")
        term.expect("Ctrl-C again to quit")
        term.type("\x03")
        assert 0 == term.wait()
    finally:
        term.close()
    assert not (work / "a.txt").exists()
    assert "\x1b" not in term.raw


# The CLI with a compactor that takes two seconds (patched in before main runs).
_SLOW_COMPACTOR = """
import sys, time
import liteagent.sdk._cli_env as env_module
from liteagent.context import CompactResult, Compactor

class Slow(Compactor):
    def maybe_compact(self, messages, usage=None, instructions=None):
        time.sleep(2)
        return CompactResult(messages=tuple(messages[-1:]), changed=True, tokens_before=10,
                             tokens_after=1)

env_module.llm_compactor = lambda **kwargs: Slow()
from liteagent.sdk._cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_cancels_a_manual_compaction(tmp_path: Path) -> None:
    """Ctrl-C during /compact: it is cancelled, nothing is recorded, and the prompt is back."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    provider = write_script(tmp_path / "script.json", [{"text": "Hi."}])
    term = Terminal(
        [
            sys.executable,
            "-c",
            _SLOW_COMPACTOR,
            "--workdir",
            str(work),
            "--home",
            str(home),
            "--provider",
            provider,
        ],
        clean_env(TERM="xterm"),
    )
    try:
        sid = term.expect(r"session (\S+)\n").group(1)
        term.type("hello\r")
        term.expect("Hi.")
        term.expect("> ")
        term.type("/compact\r")
        term.expect("compaction start")
        term.type("\x03")
        term.expect("cancelling")
        term.expect("cancelled: ")
        term.expect("> ")
        term.type("/exit\r")
        assert 0 == term.wait()
    finally:
        term.close()
    with file_checkpointer(workdir=work, home=home) as cp:
        assert "compaction" not in [e.kind for e in cp.read(sid)]
