"""``lite-agent demo``: the whole agent, offline, for real.

A scripted model (no key, no network) drives four prompts in a fresh workspace. Everything else
is real: the file and shell tools change real files, the session is a real log on disk, the
checkpoints, the restore and the compaction are the ordinary API calls, and every line printed
is what those calls returned. It ends with where the log lives and the ``lite-agent replay``
command to inspect it.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rich.console import Console

from liteagent.context import blob_spill_store
from liteagent.eventlog import CancelToken, conversation, fold
from liteagent.eventlog._messages import message_text
from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolUseBlock
from liteagent.providers import scripted

from ._agent import LiteAgent
from ._cli_commands import compaction_outcome
from ._cli_env import (
    CliEnv,
    SummaryModel,
    check_on_folders,
    cli_tools,
    expanded,
    summarizing_compactor,
)
from ._cli_errors import UsageError
from ._cli_output import LiveRenderer, checkpoint_table, make_console, short, show
from ._cli_replay import cli_view_config
from ._cli_terminal import run_live
from ._factory import create_lite_agent
from ._replay import verify_session

__all__ = ["cmd_demo", "demo_script"]

T = TypeVar("T")

_CALC_V1 = '''"""A tiny calculator."""


def add(a, b):
    return a + b
'''
_CHECK_V1 = """from calc import add

assert add(2, 3) == 5
print("all checks pass")
"""
_NOTES = "# Notes\n\n- add() works\n- TODO: subtract\n"
_README = "# calc\n\nA tiny calculator: add() and subtract(). Run `python3 check.py`.\n"

PROMPTS = (
    "Create a tiny Python calculator with add(), a check script, and a notes file.",
    "Add subtract() and check it.",
    "The notes are out of date: delete them and write a README instead.",
    "Add multiply() instead, and show 6 times 7.",
)


def _tool(name: str, call_id: str, **tool_input: object) -> ToolUseBlock:
    return ToolUseBlock(call_id, name, dict(tool_input))


def _calls(*blocks: ToolUseBlock, text: str | None = None) -> AssistantMessage:
    content = ((TextBlock(text),) if text else ()) + blocks
    return AssistantMessage(content=content, stop_reason="tool_use")


def _say(text: str) -> AssistantMessage:
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def demo_script(python: str) -> list[AssistantMessage]:
    """The scripted model's answers to :data:`PROMPTS`, in order."""
    return [
        # 1. create the project
        _calls(
            _tool("write_file", "t1", path="calc.py", content=_CALC_V1),
            text="I'll write the module first.",
        ),
        _calls(
            _tool("write_file", "t2", path="check.py", content=_CHECK_V1),
            _tool("write_file", "t3", path="NOTES.md", content=_NOTES),
        ),
        _calls(_tool("bash", "t4", command=f"{python} check.py")),
        _say("Created calc.py with add(), check.py (it passes) and NOTES.md."),
        # 2. subtract
        _calls(
            _tool(
                "edit_file",
                "t5",
                path="calc.py",
                old_string="    return a + b\n",
                new_string="    return a + b\n\n\ndef subtract(a, b):\n    return a - b\n",
            )
        ),
        _calls(
            _tool(
                "edit_file",
                "t6",
                path="check.py",
                old_string="from calc import add\n",
                new_string="from calc import add, subtract\n\nassert subtract(5, 3) == 2\n",
            )
        ),
        _calls(_tool("bash", "t7", command=f"{python} check.py")),
        _say("Added subtract(); the checks pass."),
        # 3. notes -> README
        _calls(
            _tool("delete_file", "t8", path="NOTES.md"),
            _tool("write_file", "t9", path="README.md", content=_README),
        ),
        _say("Deleted NOTES.md and wrote README.md."),
        # 4. after the restore: multiply
        _calls(
            _tool(
                "edit_file",
                "t10",
                path="calc.py",
                old_string="    return a + b\n",
                new_string="    return a + b\n\n\ndef multiply(a, b):\n    return a * b\n",
            )
        ),
        _calls(
            _tool("bash", "t11", command=f"{python} -c 'import calc; print(calc.multiply(6, 7))'")
        ),
        _say("Added multiply(): 6 * 7 = 42."),
        # 5. the summary a compaction asks for
        _say("calc.py: add() and multiply(); check.py checks add(); NOTES.md: the notes."),
    ]


def _files(root: Path) -> str:
    names = sorted(p.name for p in root.iterdir() if p.is_file())
    return ", ".join(names) or "(none)"


class _Tour:
    """Prints the demo's steps."""

    def __init__(self, agent: LiteAgent, env: CliEnv, console: Console) -> None:
        self.agent = agent
        self.env = env
        self.console = console
        self.step = 0

    def say(self, text: str, style: str | None = None) -> None:
        self.console.print(text, style=style)

    def title(self, text: str) -> None:
        self.step += 1
        self.say(f"\n── {self.step}. {text} " + "─" * max(3, 60 - len(text)), style="bold")

    def live(self, work: Callable[[CancelToken], T]) -> T:
        return run_live(self.agent, work, LiveRenderer(self.console))

    def prompt(self, text: str) -> None:
        self.say(f"> {text}", style="bold")
        result = self.live(lambda token: self.agent.send(text, cancel=token))
        self.say(f"  ({result.stop_reason}; files now: {_files(self.env.workdir)})", style="dim")

    def conversation(self) -> None:
        state = fold(self.env.checkpointer.read(self.agent.session_id))
        messages = conversation(state)
        prompts = [
            short(message_text(m.content), 50)
            for m in messages
            if m.role == "user" and any(type(b) is TextBlock for b in m.content)
        ]
        self.say(
            f"  conversation: {len(messages)} messages, {state.head} events; prompts: "
            + "; ".join(repr(p) for p in prompts)
        )


def cmd_demo(env: CliEnv, args: argparse.Namespace) -> int:
    """Run the offline demo (see the module docstring)."""
    base = (
        expanded("--dir", args.dir).resolve()
        if args.dir
        else Path(tempfile.mkdtemp(prefix="lite-agent-demo-"))
    )
    work = base / "project"
    if work.exists():
        raise UsageError(f"--dir {base}: it already holds a demo (choose a new folder)")
    check_on_folders("--dir", base, folder=True)
    made = [p for p in (work, *work.parents) if not p.exists()]  # deepest first
    work.mkdir(parents=True)
    home = env.home or str(base / "home")
    try:  # a store that cannot be opened (a bad --db) is refused before the tour starts
        demo_env = CliEnv(workdir=work, home=home, backend=env.backend, db=env.db)
        demo_env.checkpointer  # noqa: B018 -- opens it
    except BaseException:
        for folder in made:  # what this run made and left empty: the next one can use --dir
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    python = "python3" if shutil.which("python3") else shlex.quote(sys.executable)
    model = scripted(demo_script(python), stream_chunk=12, name="demo-script")
    demo_env.summary_model = SummaryModel(model)
    compactor = summarizing_compactor(
        demo_env.summary_model, "demo-script", blob_spill_store(demo_env.checkpointer.blobs)
    )
    try:
        with create_lite_agent(
            model=model,
            model_name="demo-script",
            workdir=work,
            checkpointer=demo_env.checkpointer,
            tools=cli_tools(),
            compactor=compactor,
        ) as agent:
            _run(_Tour(agent, demo_env, make_console()), agent, demo_env)
            model.assert_all_used()
    finally:
        demo_env.close()
    return 0


def _run(tour: _Tour, agent: LiteAgent, env: CliEnv) -> None:
    sid = agent.session_id
    say = tour.say
    say(f"lite-agent demo: a scripted model (offline) with the real tools in {env.workdir}")
    tour.title("three prompts: the model creates and edits a project")
    for text in PROMPTS[:3]:
        tour.prompt(text)
    tour.conversation()

    tour.title("checkpoints (one per prompt)")
    checkpoints = agent.list_checkpoints()
    show(tour.console, checkpoint_table(tour.console, checkpoints))

    target = checkpoints[1]
    tour.title(f"restore to seq {target.seq}, before {short(target.prompt, 30)!r}")
    result = tour.live(lambda token: agent.restore(sid, target.seq, cancel=token))
    say(f"  put back: {', '.join(result.restored_files)}")
    say(f"  files now: {_files(env.workdir)}")
    calc = (env.workdir / "calc.py").read_text(encoding="utf-8")
    say(f"  calc.py has subtract(): {'def subtract' in calc}")
    tour.conversation()

    tour.title("the session continues from there")
    tour.prompt(PROMPTS[3])
    calc = (env.workdir / "calc.py").read_text(encoding="utf-8")
    defined = [w[4:].split("(")[0] for w in calc.splitlines() if w.startswith("def ")]
    say(f"  calc.py defines: {', '.join(defined)}")

    tour.title("compaction (the log keeps every event)")
    instructions = "keep the file names"
    say(f"> /compact {instructions}", style="bold")
    stats = tour.live(lambda token: agent.compact(instructions, cancel=token))
    outcome = compaction_outcome(env, sid, instructions, stats, env.summary_model)
    how = (
        "older turns summarized by the model, with the instructions"
        if outcome.summarized
        else outcome.note or "no summary"
    )
    say(
        f"  the model's view: ~{stats.before} → ~{stats.after} tokens"
        + ("" if stats.changed else " (nothing to reduce)")
        + f"; {how}"
    )

    tour.title("replay: every request recomputed from the log")
    checks = verify_session(list(env.checkpointer.read(sid)), cli_view_config())
    ok = sum(c.ok for c in checks)
    say(f"  {ok} of {len(checks)} recorded requests match what the log says the model saw")

    tour.title("the log")
    say(f"  session {sid}, {env.checkpointer.head(sid)} events in {env.location}")
    flags = f"--workdir {shlex.quote(str(env.workdir))} --home {shlex.quote(str(env.home))}"
    if env.backend == "sqlite":
        flags += f" --backend sqlite --db {shlex.quote(env.location)}"
    say("  inspect it:")
    say(f"    lite-agent {flags} replay {sid}")
    say(f"    lite-agent {flags} replay {sid} --view")
