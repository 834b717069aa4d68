"""Ctrl-C and the prompt, for the CLI's main thread.

Python turns SIGINT into a ``KeyboardInterrupt`` raised wherever the main thread happens to be:
in the middle of printing the "Ctrl-C again to quit" hint (so a quick second Ctrl-C crashed the
CLI with a traceback), or just before ``input()`` blocks (so the Ctrl-C waited for the next
Enter). Here Ctrl-C is counted instead (:func:`counted_ctrl_c`), and the main thread looks at
the count where it chooses: at the prompt (:func:`read_line`) or between the agent's live
events (``run_live``).

On a terminal the prompt is GNU readline's (line editing, and the history
:func:`prompt_history` keeps per project). Readline waits in ``select`` without a timeout and
only runs Python's signal handlers when that wait is interrupted, so a Ctrl-C that lands just
before it would wait for the next key. While the prompt waits, a helper thread interrupts it
every 0.1 s with a signal that does nothing else (SIGURG), which lets a pending Ctrl-C through.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

__all__ = ["CtrlC", "counted_ctrl_c", "main_thread_signals", "prompt_history", "read_line"]

_POLL_S = 0.1


class CtrlC:
    """The Ctrl-C presses not yet taken."""

    def __init__(self) -> None:
        self._count = 0
        self._raise_once = False

    def press(self, _signum: int, _frame: FrameType | None) -> None:
        """The SIGINT handler: count, and raise only when a blocking read asked for it."""
        self._count += 1
        if self._raise_once:
            self._raise_once = False
            raise KeyboardInterrupt

    @property
    def pending(self) -> bool:
        """Whether a press is waiting to be taken."""
        return self._count > 0

    def take(self) -> int:
        """The presses since the last call."""
        count, self._count = self._count, 0
        return count

    @contextlib.contextmanager
    def raising(self) -> Iterator[None]:
        """Let the next press raise ``KeyboardInterrupt`` out of a blocking call inside.

        Only the first press raises (the handler disarms itself before raising), so a second
        press lands as a count, never inside the caller's ``except`` block."""
        self._raise_once = True
        try:
            yield
        finally:
            self._raise_once = False


@contextlib.contextmanager
def counted_ctrl_c() -> Iterator[CtrlC]:
    """Count Ctrl-C meanwhile instead of raising ``KeyboardInterrupt`` (main thread only;
    elsewhere nothing is installed and the count stays 0)."""
    ctrl_c = CtrlC()
    if threading.current_thread() is not threading.main_thread():
        yield ctrl_c
        return
    old = signal.signal(signal.SIGINT, ctrl_c.press)
    try:
        yield ctrl_c
    finally:
        signal.signal(signal.SIGINT, old)


@contextlib.contextmanager
def main_thread_signals() -> Iterator[None]:
    """Block SIGINT in this thread meanwhile, so the threads started meanwhile (and the threads
    they start: actors, workers) inherit a mask that keeps Ctrl-C for the main thread. Without
    it the kernel may deliver SIGINT to another thread, and the main thread would only notice
    at its next poll."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def _nudged() -> Iterator[None]:
    """Interrupt the main thread's blocking wait every 0.1 s meanwhile (see the module
    docstring); SIGURG is ignored by default, so a late nudge is harmless."""
    main = threading.main_thread().ident
    assert main is not None
    stop = threading.Event()

    def nudge() -> None:
        while not stop.wait(_POLL_S):
            signal.pthread_kill(main, signal.SIGURG)

    old = signal.signal(signal.SIGURG, lambda _signum, _frame: None)
    with main_thread_signals():
        thread = threading.Thread(target=nudge, name="lite-agent-prompt", daemon=True)
        thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        signal.signal(signal.SIGURG, old)


def read_line(prompt: str, ctrl_c: CtrlC) -> str:
    """One line from stdin after ``prompt``; ``KeyboardInterrupt`` when Ctrl-C is pressed
    before it is complete (the count of presses stays in ``ctrl_c``), ``EOFError`` at the end.

    The first press raises out of the blocking read (:meth:`CtrlC.raising`); one pending from
    before raises at once. On a terminal (main thread) ``input()`` edits the line with readline
    and is nudged so a pending press is seen within 0.1 s; piped input blocks in
    ``readline()`` of stdin."""
    with ctrl_c.raising():
        if ctrl_c.pending:
            raise KeyboardInterrupt
        if sys.stdin.isatty() and threading.current_thread() is threading.main_thread():
            with _nudged():
                return input(prompt)
        sys.stdout.write(prompt)
        sys.stdout.flush()
        line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.removesuffix("\n")


@contextlib.contextmanager
def prompt_history(path: Path) -> Iterator[None]:
    """Line editing with the history of ``path`` (the last 1,000 lines), saved back on the way
    out; nothing when stdin is not a terminal or readline is missing."""
    try:
        import readline  # noqa: PLC0415 -- only the interactive prompt needs it
    except ImportError:  # pragma: no cover -- CPython on Linux has it
        yield
        return
    if not sys.stdin.isatty():
        yield
        return
    readline.clear_history()
    readline.set_history_length(1000)
    with contextlib.suppress(OSError):
        readline.read_history_file(path)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            readline.write_history_file(path)
