"""Ctrl-C and the prompt, for the CLI's main thread.

Python turns SIGINT into a ``KeyboardInterrupt`` raised wherever the main thread happens to be:
in the middle of printing the "Ctrl-C again to quit" hint (so a quick second Ctrl-C crashed the
CLI with a traceback), or just before ``input()`` blocks in ``read`` (so the Ctrl-C waited
for the next Enter). Here Ctrl-C is counted instead (:func:`counted_ctrl_c`), and the main
thread looks at the count where it chooses: between short waits for a line
(:func:`read_line`) or for the agent's next live event (``run_live``).
"""

from __future__ import annotations

import contextlib
import select
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["CtrlC", "counted_ctrl_c", "main_thread_signals", "read_line"]

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


def read_line(prompt: str, ctrl_c: CtrlC) -> str:
    """One line from stdin after ``prompt``; ``KeyboardInterrupt`` when Ctrl-C is pressed
    before it is complete (the count of presses stays in ``ctrl_c``), ``EOFError`` at the end.

    On a terminal this waits in short ``select`` slices and looks at the count between them,
    so a Ctrl-C is seen within 0.1 s wherever it landed. Piped input (one ``read`` may buffer
    several lines, so ``select`` cannot tell whether a line is waiting) blocks in
    ``readline``, which the first Ctrl-C interrupts."""
    stdin = sys.stdin
    sys.stdout.write(prompt)
    sys.stdout.flush()
    if stdin.isatty():
        while not select.select([stdin], [], [], _POLL_S)[0]:
            if ctrl_c.pending:  # the caller takes the count
                raise KeyboardInterrupt
        line = stdin.readline()  # canonical mode: the terminal hands over one whole line
    else:
        if ctrl_c.pending:
            raise KeyboardInterrupt
        with ctrl_c.raising():
            line = stdin.readline()
    if not line:
        raise EOFError
    return line.removesuffix("\n")
