"""The live progress bar of a compaction on a terminal: its empty track, its completed part
and a finished bar look different on 16-colour, 256-colour and truecolor terminals alike, and a
long detail is cut short instead of squeezing the bar out of an 80-column line."""

from __future__ import annotations

import io
import re
from typing import Literal

import pytest
from _cli_runner import LITE_AGENT, Cli, Terminal, clean_env, two_prompts
from rich.console import Console

from liteagent.actors._hub import LiveEvent
from liteagent.actors._live import CompactionProgress
from liteagent.sdk._cli_output import LiveRenderer

_SGR = re.compile(r"\x1b\[([0-9;]*)m")
_LONG = "tool results 12 → 3 spilled to the archive, 40 turns dropped, 9 snips kept as they are"


def terminal(
    color_system: Literal["standard"] | None, width: int = 80, no_color: bool = False
) -> tuple[Console, io.StringIO]:
    """A console that writes what a terminal of ``width`` columns with ``color_system`` gets
    (under ``NO_COLOR`` with ``no_color``)."""
    out = io.StringIO()
    console = Console(
        file=out,
        force_terminal=True,
        force_interactive=True,
        color_system=color_system,
        width=width,
        no_color=no_color,
        markup=False,
        highlight=False,
    )
    return console, out


def frames(raw: str) -> list[str]:
    """Each drawing of the live bar, escape codes kept."""
    return [f for f in re.split(r"\r\x1b\[2K|\r?\n", raw) if "━" in f]


def bar_styles(frame: str) -> list[str]:
    """The SGR code of each bar cell of one frame, in order ("" when uncoloured)."""
    styles: list[str] = []
    code = ""
    for part in re.split(r"(\x1b\[[0-9;]*m)", frame):
        match = _SGR.fullmatch(part)
        if match:
            code = "" if match.group(1) in ("", "0") else match.group(1)
            continue
        styles += [code for char in part if char in "━╸╺"]
    return styles


def visible(frame: str) -> str:
    """A frame as a person reads it."""
    return re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", frame)


def show(renderer: LiveRenderer, *events: CompactionProgress) -> None:
    """Feed the renderer the events of one compaction."""
    for event in events:
        renderer.feed(LiveEvent("s1", event))


@pytest.mark.processes
@pytest.mark.parametrize(
    "term",
    [
        {"TERM": "xterm"},
        {"TERM": "xterm-256color"},
        {"TERM": "xterm-256color", "COLORTERM": "truecolor"},
    ],
)
def test_empty_completed_and_finished_bars_look_different(cli: Cli, term: dict[str, str]) -> None:
    """``lite-agent compact`` on a 16-colour, a 256-colour and a truecolor terminal: the empty
    track, the completed part and a finished bar each have their own colour."""
    two_prompts(cli)
    argv = [str(LITE_AGENT), "--workdir", str(cli.work), "--home", str(cli.home)]
    terminal = Terminal([*argv, "compact", "s1"], clean_env(**term))
    try:
        assert 0 == terminal.wait()
    finally:
        terminal.close()
    drawn = frames(terminal.raw)
    empty = bar_styles(drawn[0])[-1]
    completed = next(s[0] for f in drawn if (s := bar_styles(f))[0] != s[-1])
    finished = bar_styles(drawn[-1])[0]
    assert 3 == len({empty, completed, finished}), (empty, completed, finished)
    assert {finished} == set(bar_styles(drawn[-1]))


def test_no_colour_leaves_the_bar_uncoloured() -> None:
    """Under NO_COLOR, and on a terminal without colours, the bar has no colour code."""
    for console, out in (terminal("standard", no_color=True), terminal(None)):
        show(LiveRenderer(console), CompactionProgress(phase="done", stage="project"))
        assert {""} == {s for f in frames(out.getvalue()) for s in bar_styles(f)}


def test_a_long_detail_is_cut_short_and_the_bar_stays() -> None:
    """At 80 columns a long detail ends in an ellipsis: the description, the whole bar and the
    percentage stay, and no line is wider than the terminal."""
    console, out = terminal("standard")
    show(
        LiveRenderer(console),
        CompactionProgress(phase="progress", stage="normalize", completed=1, total=1, detail=_LONG),
    )
    line = visible(frames(out.getvalue())[-1]).rstrip()
    assert line.startswith("  compacting normalize ━━━━━━━━━━━━━━━━━━━━ 100%   tool results 12")
    assert line.endswith("…")
    assert 80 >= len(line)
