"""How the CLI shows things: JSON for machines; for people, lines, tables, colour and progress
bars through ``rich``, and a renderer of an agent's live events (streamed text, tool calls,
progress).

Escape codes are written only to an interactive terminal: output that is not a terminal, a
``TERM=dumb`` terminal, and the ``--json`` documents get plain text; ``NO_COLOR`` turns colour
off (:func:`make_console`). Progress is a live bar on an interactive terminal and one line per
step elsewhere. Text from the model is shown with its control characters made visible, so it
cannot move the cursor or change colours either.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TextIO

import msgspec
from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn
from rich.table import Column, Table

from liteagent.actors._hub import LiveEvent, Missed
from liteagent.actors._live import (
    CheckpointRestore,
    CompactionProgress,
    ToolCallFinished,
    ToolCallStarted,
)
from liteagent.actors._restore_plan import Checkpoint
from liteagent.eventlog import Checkpointer, SessionInfo
from liteagent.eventlog.errors import LiteAgentError
from liteagent.providers._contract import TextDelta, ToolInputDelta, ToolUseStart
from liteagent.tools._paths import BIDI_CONTROLS, printed_name

from ._cli_errors import OutputClosedError, one_line

__all__ = [
    "LiveRenderer",
    "SessionRow",
    "argument_text",
    "checkpoint_table",
    "emit_json",
    "finite_time",
    "json_text",
    "make_console",
    "make_table",
    "one_line",
    "print_table",
    "printable",
    "session_rows",
    "session_table",
    "short",
    "to_json",
    "when",
]

_SUMMARY = 60
_BAR_WIDTH = 20
_ARG_KEYS = ("path", "command", "pattern", "file_path")
_PLAIN_WIDTH = 1000  # what rich lays tables out in when the output is not a terminal
# control characters but newline and tab, and the bidirectional formatting ones
_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f{BIDI_CONTROLS}]")


class _Console(Console):
    """A rich console that leaves a closed output to the entry point (rich's own handling
    exits with 1)."""

    def on_broken_pipe(self) -> None:
        """Stop writing; raise :class:`OutputClosedError` for the entry point."""
        self.quiet = True
        raise OutputClosedError("the reader of the output went away")


def make_console(stream: TextIO | None = None) -> Console:
    """A rich console on ``stream`` (default: stdout): colour and cursor movement only on an
    interactive terminal (rich reads ``NO_COLOR``, ``TERM``, ``FORCE_COLOR`` and
    ``TTY_COMPATIBLE``), no markup or emoji codes, no highlighting, and no wrapping of long
    lines; off a terminal, tables are laid out as wide as they need. It is at most 1,000
    columns wide, whatever ``$COLUMNS`` says."""
    file = stream or sys.stdout
    try:
        tty = file.isatty()
    except (AttributeError, ValueError):
        tty = False
    console = _Console(
        file=file,
        markup=False,
        emoji=False,
        highlight=False,
        soft_wrap=True,
        width=None if tty else _PLAIN_WIDTH,
    )
    # $COLUMNS=99999999: each bar refresh wrote that many spaces, and a compaction never ended;
    # only then is the width fixed (otherwise it follows the terminal as it is resized)
    if console.width > _PLAIN_WIDTH:  # noqa: PLR1730 -- min() would fix every width
        console.width = _PLAIN_WIDTH
    return console


def quiet_console() -> Console:
    """A console that prints nothing (progress under ``--json``)."""
    return Console(quiet=True)


def to_json(value: Any) -> Any:
    """``value`` as plain JSON data (structs become objects)."""
    return msgspec.to_builtins(value)


_SURROGATE = re.compile("[\ud800-\udfff]")
_NOT_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def json_text(value: Any, indent: int | None = 2) -> str:
    """``value`` (structs become objects) as JSON text that UTF-8 can carry: non-ASCII
    characters as they are, except lone surrogates, which are written as JSON escapes; a
    number JSON has no form for (NaN, an infinity: a log can hold them) as the string
    ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``."""
    data = to_json(value)
    try:
        text = json.dumps(data, ensure_ascii=False, indent=indent, allow_nan=False)
    except ValueError:  # a number that is not finite
        text = json.dumps(_finite(data), ensure_ascii=False, indent=indent, allow_nan=False)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _finite(value: Any) -> Any:
    """JSON data with each NaN or infinity replaced by its name as a string."""
    if type(value) is float and not math.isfinite(value):
        return _NOT_FINITE[repr(value)]
    if type(value) is dict:
        return {k: _finite(v) for k, v in value.items()}
    if type(value) is list or type(value) is tuple:
        return [_finite(v) for v in value]
    return value


def emit_json(value: Any, out: TextIO | None = None) -> None:
    """Print ``value`` as indented JSON (:func:`json_text`)."""
    print(json_text(value), file=out or sys.stdout)


def argument_text(value: object) -> str:
    """A tool call's argument as a line shows it: a string as it is, any other value as its
    JSON text (``null``, ``["ls", "-l"]``), never Python's repr (``None``, ``['ls', '-l']``)."""
    return value if isinstance(value, str) else json_text(value, indent=None)


def printable(text: str) -> str:
    """``text`` with its control characters (other than newline and tab) shown as ``^X`` (or
    ``\\xNN``), and the bidirectional formatting ones as ``\\uNNNN``."""

    def caret(match: re.Match[str]) -> str:
        code = ord(match.group())
        if code < 0x80:
            return f"^{chr(code ^ 0x40)}"
        return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"

    return _CONTROL.sub(caret, text)


def file_names(paths: Iterable[str]) -> str:
    """File names on one line, comma-separated, each as the tools print it (a newline in a
    name as ``\\x0a``: a name never breaks or reorders the line it is on)."""
    return ", ".join(printed_name(p) for p in paths)


def finite_time(ts: object) -> float | None:
    """``ts`` when it is a usable timestamp (a finite number), else ``None`` (a damaged store
    can hold an infinity or a string)."""
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
        return None
    return float(ts)


def when(ts: object) -> str:
    """A local timestamp, to the second; ``unknown`` for one that is not a time."""
    value = finite_time(ts)
    if value is None:
        return "unknown"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value))
    except (OverflowError, OSError, ValueError):  # out of the platform's range
        return "unknown"


def short(text: str, limit: int = _SUMMARY) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    flat = " ".join(printable(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def make_table(console: Console, *columns: str) -> Table:
    """A table with these columns, in the CLI's style."""
    return _table(console, *columns)


def _table(console: Console, *columns: str) -> Table:
    table = Table(
        box=box.SIMPLE_HEAD if console.is_terminal else None,
        show_edge=False,
        pad_edge=False,
        header_style="bold",
    )
    for name in columns:
        table.add_column(name, overflow="fold")
    return table


def print_table(console: Console, table: Table) -> None:
    """Print ``table``; off a terminal without the padding after each row's last cell."""
    if console.is_terminal:
        console.print(table)
        return
    with console.capture() as captured:
        console.print(table)
    for line in captured.get().splitlines():
        console.out(line.rstrip())


@dataclass
class SessionRow:
    """A session as ``sessions`` lists it: its event count, or (``events`` ``None``) the
    reason it cannot be read."""

    info: SessionInfo
    events: int | None
    damaged: str | None = None


def session_rows(cp: Checkpointer, sessions: list[SessionInfo]) -> list[SessionRow]:
    """The ``sessions`` with their event counts; one that cannot be read is listed as damaged
    (never failing the listing), one with an empty log (all a salvage could keep) is left out:
    the other commands say there is no such session."""
    rows: list[SessionRow] = []
    for s in sessions:
        try:
            head = cp.head(s.id)
        except LiteAgentError as e:
            rows.append(SessionRow(s, None, one_line(e)))
            continue
        if head:
            rows.append(SessionRow(s, head))
    return rows


def session_table(console: Console, sessions: list[SessionRow]) -> Table | str:
    """The sessions as a table (id, last activity, events), or a line saying there are
    none; a session that cannot be read says so in its events column."""
    if not sessions:
        return "no sessions"
    table = _table(console, "session", "last active", "events")
    for s in sessions:
        events = str(s.events) if s.damaged is None else f"damaged: {short(s.damaged, 80)}"
        table.add_row(s.info.id, when(s.info.mtime), events)
    return table


def checkpoint_table(console: Console, checkpoints: list[Checkpoint]) -> Table | str:
    """The checkpoints as a table: seq, time, prompt, the side effects since that a restore
    cannot undo (shell commands, untracked tools: ``restore --dry-run`` lists them), and the
    files a restore would put back (and those it cannot); or a line saying there are none."""
    if not checkpoints:
        return "no checkpoints"
    table = _table(console, "seq", "time", "prompt", "effects", "files")
    for cp in checkpoints:
        files = file_names(cp.files) if cp.files else "-"
        if cp.unavailable_files:
            files += f" (cannot restore: {file_names(cp.unavailable_files)})"
        effects = str(cp.side_effects) if cp.side_effects else "-"
        table.add_row(str(cp.seq), when(cp.ts), short(cp.prompt, 40), effects, files)
    return table


def show(console: Console, what: Table | str) -> None:
    """Print a table, or a line."""
    if isinstance(what, Table):
        print_table(console, what)
    else:
        console.print(what)


class _Bar:
    """The bar of one compaction or restore; its percentage never goes back.

    Its colours are of the 8 basic ones, which every colour terminal shows as they are (rich's
    own, given as RGB, fall to the same grey for a finished bar and the empty track on a
    16-colour terminal). The line is as wide as the terminal and a long detail, the only
    flexible column, is cut short with an ellipsis, so the bar always stays on it."""

    def __init__(self, console: Console, kind: str) -> None:
        self.kind = kind
        self.percent = 0.0
        self.progress = Progress(
            TextColumn("  {task.description}"),
            BarColumn(
                bar_width=_BAR_WIDTH,
                style="bright_black",
                complete_style="cyan",
                finished_style="green",
                pulse_style="cyan",
            ),
            TaskProgressColumn(),
            TextColumn(
                "{task.fields[detail]}",
                table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis"),
            ),
            console=console,
            auto_refresh=False,
            redirect_stdout=False,
            redirect_stderr=False,
            expand=True,
        )
        self.task: TaskID = self.progress.add_task("", total=100, detail="")
        self.progress.start()

    def update(self, description: str, percent: float, detail: str) -> None:
        self.percent = max(self.percent, percent)
        self.progress.update(
            self.task,
            description=description,
            completed=self.percent,
            detail=f"  {detail}" if detail else "",
        )
        self.progress.refresh()

    def stop(self) -> None:
        self.progress.stop()


def _fraction(completed: int, total: int) -> float:
    return 100.0 * min(completed, total) / total if total > 0 else 0.0


class LiveRenderer:
    """Prints an agent's live events as they come: the model's text streamed, one compact
    line per tool call, and the progress of a compaction or restore (a bar on an interactive
    terminal, a line per step elsewhere; its percentage never goes back). A turn that stops
    early is not shown here: the caller reports the error ``send`` raises."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or make_console()
        self._inputs: dict[int, tuple[str, list[str]]] = {}  # block index -> (call id, json)
        self._mid_line = False
        self._bar: _Bar | None = None
        self._percent = 0.0  # the line-per-step progress of the current operation

    def _end_bar(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def line(self, text: str, style: str | None = None) -> None:
        """Print a whole line (ending a streamed one first)."""
        self._end_bar()
        if self._mid_line:
            self.console.out("")
            self._mid_line = False
        self.console.out(text, style=style)

    def finish(self) -> None:
        """End a streamed line and any progress bar."""
        self._end_bar()
        if self._mid_line:
            self.console.out("")
            self._mid_line = False

    def cancelling(self) -> None:
        """Say that Ctrl-C was seen and the work is being cancelled."""
        self.line("  cancelling…", style="yellow")

    def feed(self, item: LiveEvent | Missed) -> None:
        """Show one live event."""
        if isinstance(item, Missed):
            self.line(f"  … {item.count} live events not shown", style="dim")
            return
        event = item.event
        if isinstance(event, TextDelta):
            self._end_bar()
            text = printable(event.text)
            self.console.out(text, end="")
            self._mid_line = not text.endswith("\n")
        elif isinstance(event, ToolUseStart):
            self._inputs[event.index] = (event.id, [])
        elif isinstance(event, ToolInputDelta):
            if event.index in self._inputs:
                self._inputs[event.index][1].append(event.partial_json)
        elif isinstance(event, ToolCallStarted):
            self.line(f"  → {event.name}{self._args(event.id)}", style="cyan")
        elif isinstance(event, ToolCallFinished):
            if event.is_error:
                self.line(f"    ✗ {event.name} failed", style="red")
        elif isinstance(event, CompactionProgress):
            self._compaction(event)
        elif isinstance(event, CheckpointRestore):
            self._restore(event)

    def _progress(
        self, kind: str, phase: str, description: str, percent: float, detail: str
    ) -> None:
        """One step of a compaction or restore: a bar on an interactive terminal, a line
        elsewhere."""
        if phase in ("error", "cancelled"):  # the caller reports the failure (on stderr)
            self.finish()
            return
        if phase == "start":
            self._percent = 0.0
        self._percent = max(self._percent, percent)
        ends = phase == "done"
        if self.console.is_interactive:
            if self._bar is None or self._bar.kind != kind:
                if self._mid_line:
                    self.finish()
                self._end_bar()
                self._bar = _Bar(self.console, kind)
            self._bar.update(description, self._percent, detail)
            if ends:
                self._end_bar()
            return
        self._end_bar()
        if phase in ("progress", "done"):
            description = f"{description} {self._percent:.0f}%"
        self.line(f"  {description}" + (f"  {detail}" if detail else ""))

    def _compaction(self, event: CompactionProgress) -> None:
        stage = f" {event.stage}" if event.stage else ""
        detail = short(event.detail, 70) if event.detail and event.phase != "error" else ""
        if event.phase == "progress":
            what, percent = f"compacting{stage}", _fraction(event.completed, event.total)
        else:
            what, percent = f"compaction {event.phase}{stage}", 100.0 * (event.phase == "done")
        self._progress("compaction", event.phase, what, percent, detail)

    def _restore(self, event: CheckpointRestore) -> None:
        detail = short(event.detail, 70) if event.detail and event.phase != "error" else ""
        if event.phase == "progress":
            what = f"restoring {event.completed}/{event.total} files"
            percent = _fraction(event.completed, event.total)
        elif event.phase == "done":
            what, percent = f"restore done: {event.completed} files put back", 100.0
        else:
            what, percent = f"restore {event.phase}", 0.0
        self._progress("restore", event.phase, what, percent, detail)

    def _args(self, call_id: str) -> str:
        for index, (cid, parts) in list(self._inputs.items()):
            if cid == call_id:
                del self._inputs[index]
                try:
                    args = json.loads("".join(parts) or "{}")
                except ValueError:
                    return ""
                if not isinstance(args, dict):
                    return ""
                shown = [short(argument_text(args[k]), 50) for k in _ARG_KEYS if k in args]
                return f" {shown[0]}" if shown else ""
        return ""
