"""The interactive prompt: ``prompt_toolkit`` on a terminal, plain lines elsewhere.

On a terminal (stdin and stdout both), :class:`TerminalPrompt` is a ``prompt_toolkit`` prompt
awaited on the CLI's event loop: line editing, and the history of the project
(:class:`ProjectHistory`; the up arrow recalls earlier prompts, also from earlier runs). In raw
mode Ctrl-C and Ctrl-D are key presses: Ctrl-C on a typed line drops that line (a new prompt
follows), Ctrl-C at an empty prompt interrupts it, and Ctrl-D at an empty line ends the
input. A SIGINT from elsewhere (``kill -INT``) interrupts it too; one that lands
while no prompt waits is kept for the next prompt (see :mod:`._cli_terminal`). Keys typed while
a turn runs are kept for the next prompt.

Otherwise (:class:`LinePrompt`: stdin or stdout is not a terminal, or the terminal is
``TERM=dumb``, which gets no escape code at all) the prompt reads lines from stdin as they
arrive, without blocking the loop, so a SIGINT interrupts the wait at once; on a dumb terminal
the terminal's own line editing applies, Ctrl-C is a SIGINT and Ctrl-D at an empty line ends
the input.

Either prompt's :meth:`read` returns the line, ``None`` when Ctrl-C interrupted it, and raises
:class:`EndOfInputError` at the end of the input.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from prompt_toolkit import PromptSession
from prompt_toolkit.application.current import get_app_or_none
from prompt_toolkit.history import History
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.utils import is_dumb_terminal
from rich.console import Console

from ._cli_errors import EndOfInputError
from ._cli_terminal import Interrupts

__all__ = ["LinePrompt", "ProjectHistory", "Prompt", "TerminalPrompt", "make_prompt"]

HISTORY_LINES = 1000

_READLINE_HEADER = "_HiStOrY_V2_"  # the first line of a history file libedit wrote


class ProjectHistory(History):
    """The prompt history of a project, in the format GNU readline writes (one prompt per
    line, oldest first); the last :data:`HISTORY_LINES` are kept. A prompt of several lines (a
    paste) stays in this run's history only. A file that cannot be read or written is no
    history, never an error."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def _lines(self) -> list[str]:
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except (OSError, ValueError):
            return []
        return [line for line in text.splitlines() if line and line != _READLINE_HEADER]

    def load_history_strings(self) -> Iterable[str]:
        """The stored prompts, newest first."""
        return list(reversed(self._lines()[-HISTORY_LINES:]))

    def store_string(self, string: str) -> None:
        """Append a prompt to the file (trimmed to the last lines now and then)."""
        if not string.strip() or "\n" in string or "\r" in string:
            return
        with contextlib.suppress(OSError, ValueError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(string + "\n")
            lines = self._lines()
            if len(lines) > 2 * HISTORY_LINES:
                kept = "".join(line + "\n" for line in lines[-HISTORY_LINES:])
                temp = self.path.with_name(self.path.name + ".tmp")
                temp.write_text(kept, encoding="utf-8")
                temp.replace(self.path)


class Prompt(Protocol):
    """What the interactive loop reads lines with; after an interrupted :meth:`read` the
    cursor is at the start of a line when ``ends_line`` is true."""

    ends_line: bool

    async def read(self, prompt: str) -> str | None:
        """The next line; ``None`` when Ctrl-C interrupted the wait;
        :class:`EndOfInputError` at the end."""
        ...


class TerminalPrompt:
    """The ``prompt_toolkit`` prompt (see the module docstring)."""

    ends_line = True

    def __init__(self, history: Path, interrupts: Interrupts) -> None:
        self.interrupts = interrupts
        keys = KeyBindings()

        @keys.add("c-c")
        def _ctrl_c(event: KeyPressEvent) -> None:
            if event.current_buffer.text:
                event.app.exit(result="", style="class:aborting")  # the line is dropped
            else:
                event.app.exit(exception=KeyboardInterrupt, style="class:aborting")

        self.session: PromptSession[str] = PromptSession(
            history=ProjectHistory(history), key_bindings=keys
        )

    def _interrupt(self) -> None:
        app = get_app_or_none()
        if app is not None and app.future is not None and not app.future.done():
            app.exit(exception=KeyboardInterrupt, style="class:aborting")
        else:
            self.interrupts.keep()

    async def read(self, prompt: str) -> str | None:
        """The next line (see :class:`Prompt`)."""
        with self.interrupts.routed(self._interrupt):
            try:
                return await self.session.prompt_async(prompt, handle_sigint=False)
            except KeyboardInterrupt:
                return None
            except EOFError as e:
                raise EndOfInputError("the end of the input") from e


class LinePrompt:
    """Lines from stdin read as they arrive, with no escape codes (see the module
    docstring)."""

    ends_line = False

    def __init__(self, interrupts: Interrupts, console: Console, fd: int = 0) -> None:
        self.interrupts = interrupts
        self.console = console
        self.fd = fd
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._text = ""
        self._eof = False
        self._watching = False
        self._waiter: asyncio.Future[bool] | None = None

    def _fill(self) -> None:
        """Read what is there (a read after readiness, or of a file, does not block)."""
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        self._text += self._decoder.decode(data, final=not data)
        if not data:
            self._eof = True
            self._unwatch()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(True)

    def _unwatch(self) -> None:
        if self._watching:
            asyncio.get_running_loop().remove_reader(self.fd)
            self._watching = False

    def _watch(self) -> bool:
        """Watch stdin on the loop; False where it cannot be watched (a regular file)."""
        if not self._watching:
            try:
                asyncio.get_running_loop().add_reader(self.fd, self._fill)
            except (OSError, ValueError):
                return False
            self._watching = True
        return True

    async def read(self, prompt: str) -> str | None:
        """The next line (see :class:`Prompt`)."""
        self.console.out(prompt, end="")
        while "\n" not in self._text and not self._eof:
            if not self._watch():
                self._fill()
                continue
            waiter = asyncio.get_running_loop().create_future()
            self._waiter = waiter

            def interrupt(waiter: asyncio.Future[bool] = waiter) -> None:
                if not waiter.done():
                    waiter.set_result(False)

            with self.interrupts.routed(interrupt):
                if not await waiter:
                    return None
        if not self._text and self._eof:
            self._unwatch()
            raise EndOfInputError("the end of the input")
        line, _, self._text = self._text.partition("\n")
        return line.removesuffix("\r")

    def close(self) -> None:
        """Stop watching stdin."""
        self._unwatch()


def make_prompt(history: Path, interrupts: Interrupts, console: Console) -> Prompt:
    """The prompt for this process's stdin and stdout (see the module docstring)."""
    if sys.stdin.isatty() and sys.stdout.isatty() and not is_dumb_terminal():
        return TerminalPrompt(history, interrupts)
    return LinePrompt(interrupts, console)
