"""Ctrl-C, and long operations shown live, on the CLI's asyncio event loop.

SIGINT reaches the CLI through the loop (``loop.add_signal_handler``): the signal's C-level
handler writes to the loop's wake-up descriptor, so the loop wakes at once whichever thread the
kernel interrupted, and the press is handled on the loop between two callbacks. It is never
raised as ``KeyboardInterrupt`` wherever the main thread happens to be, which is what broke the
earlier prompt: a quick second Ctrl-C crashed inside the printing of the "Ctrl-C again" hint,
a Ctrl-C landing just before a blocking read waited for the next Enter, and a Ctrl-C while a
turn was cancelling escaped the wait. No thread polls or signals the main thread.

Where a press goes depends on what the CLI is doing (:meth:`Interrupts.routed`): a running
turn, compaction or restore is cancelled (:func:`live`); a waiting prompt is interrupted (see
:mod:`._cli_prompt`); in between, the press is kept and the next prompt or operation takes it.
The threads the CLI starts (its workers, the agent's actors) start with SIGINT blocked
(:func:`main_thread_signals`), so the kernel delivers Ctrl-C to the main thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from liteagent.eventlog import CancelToken
from liteagent.eventlog.errors import OperationCancelledError

from ._agent import LiteAgent
from ._cli_errors import OutputClosedError, OutputWriteError, plain_error
from ._cli_output import LiveRenderer

__all__ = ["Interrupts", "handling_ctrl_c", "live", "main_thread_signals", "run_live", "run_loop"]

T = TypeVar("T")


class Interrupts:
    """The Ctrl-C presses of one event loop: each goes to the current route, or is kept for
    whoever takes it next."""

    def __init__(self) -> None:
        self._route: Callable[[], None] | None = None
        self._kept = 0

    def press(self) -> None:
        """A Ctrl-C (called on the loop)."""
        if self._route is not None:
            self._route()
        else:
            self.keep()

    def keep(self) -> None:
        """Keep a press for the next :meth:`take`."""
        self._kept += 1

    def take(self) -> int:
        """The presses kept since the last call."""
        count, self._kept = self._kept, 0
        return count

    @contextlib.contextmanager
    def routed(self, handler: Callable[[], None]) -> Iterator[None]:
        """Send the presses to ``handler`` meanwhile."""
        previous, self._route = self._route, handler
        try:
            yield
        finally:
            self._route = previous


@contextlib.contextmanager
def handling_ctrl_c(loop: asyncio.AbstractEventLoop) -> Iterator[Interrupts]:
    """Handle SIGINT on ``loop`` meanwhile (see the module docstring); the previous handler
    comes back afterwards. Off the main thread nothing is installed."""
    interrupts = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    old = signal.getsignal(signal.SIGINT)
    loop.add_signal_handler(signal.SIGINT, interrupts.press)
    try:
        yield interrupts
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        if old is not None:
            signal.signal(signal.SIGINT, old)


@contextlib.contextmanager
def main_thread_signals() -> Iterator[None]:
    """Block SIGINT in this thread meanwhile, so the threads started meanwhile (and the threads
    they start: actors, workers) inherit a mask that keeps Ctrl-C for the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _resolve(
    future: asyncio.Future[Any], value: Any = None, error: BaseException | None = None
) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _post(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
    """Run ``callback(*args)`` on ``loop`` (from another thread); nothing once it is closed."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


class _Shown:
    """The renderer as the loop calls it: an output that cannot be written (closed, a full
    disk) is remembered (an error raised in a loop callback would only be logged by asyncio,
    with its traceback) and nothing more is shown."""

    def __init__(self, renderer: LiveRenderer) -> None:
        self.renderer = renderer
        self.closed: BaseException | None = None

    def feed(self, item: Any) -> None:
        """Show one live event, unless the output is closed."""
        self._guarded(self.renderer.feed, item)

    def finish(self) -> None:
        """End the renderer's line and bar, unless the output is closed."""
        self._guarded(self.renderer.finish)

    def cancelling(self) -> None:
        """Say that the work is being cancelled, unless the output is closed."""
        self._guarded(self.renderer.cancelling)

    def _guarded(self, call: Callable[..., None], *args: Any) -> None:
        if self.closed is not None:
            return
        try:
            call(*args)
        except Exception as e:  # noqa: BLE001 -- kept, raised once the work has stopped
            self.closed = e

    def raise_failure(self) -> None:
        """Raise what stopped the showing: :class:`OutputClosedError` when the reader went
        away (the entry point ends quietly), :class:`OutputWriteError` when the output could
        not be written (a full disk)."""
        if isinstance(self.closed, (OutputClosedError, BrokenPipeError)):
            raise OutputClosedError("the reader of the output went away") from self.closed
        if isinstance(self.closed, (OSError, ValueError)):  # ValueError: a closed file
            why = plain_error(self.closed)
            raise OutputWriteError(f"cannot write the output: {why}") from self.closed
        if self.closed is not None:
            raise self.closed


async def live(
    agent: LiteAgent,
    work: Callable[[CancelToken], T],
    renderer: LiveRenderer,
    interrupts: Interrupts,
    *,
    reason: str = "interrupted (Ctrl-C)",
) -> T:
    """Run ``work(cancel)`` in a worker thread while the loop shows the agent's live events;
    Ctrl-C (also one pressed before this started) cancels the token, and the events are shown
    until the work has stopped. Returns its result or raises its error; when the output could not be
    written meanwhile, the work still finishes, and then :class:`OutputClosedError` is raised
    (the reader went away) or :class:`OutputWriteError` (a full disk)."""
    loop = asyncio.get_running_loop()
    token = CancelToken()
    result: asyncio.Future[T] = loop.create_future()
    drained: asyncio.Future[None] = loop.create_future()
    subscription = agent.subscribe(8192)
    shown = _Shown(renderer)

    def run() -> None:
        try:
            value = work(token)
        except BaseException as e:  # noqa: BLE001 -- handed to the loop
            if isinstance(e, (KeyboardInterrupt, SystemExit)):  # not a loop future's business
                e = OperationCancelledError(f"the work stopped ({type(e).__name__})")
            _post(loop, _resolve, result, None, e)
        else:
            _post(loop, _resolve, result, value)

    def pump() -> None:
        try:
            for item in subscription:
                _post(loop, shown.feed, item)
        finally:
            _post(loop, _resolve, drained)

    def cancel() -> None:
        if not token.cancelled:
            token.cancel(reason)
            shown.cancelling()

    with main_thread_signals():
        threading.Thread(target=pump, name="lite-agent-events", daemon=True).start()
    try:
        with interrupts.routed(cancel):
            if interrupts.take():
                cancel()
            with main_thread_signals():
                threading.Thread(target=run, name="lite-agent-work", daemon=True).start()
            await asyncio.wait([result])
    finally:
        subscription.close()
        await drained
        shown.finish()
    value = result.result()  # the work's own error comes first
    shown.raise_failure()
    return value


def run_loop(main: Callable[[Interrupts], Coroutine[Any, Any, T]]) -> T:
    """Run ``main(interrupts)`` on a new event loop that handles Ctrl-C (see the module
    docstring)."""

    async def go() -> T:
        with handling_ctrl_c(asyncio.get_running_loop()) as interrupts:
            return await main(interrupts)

    return asyncio.run(go())


def run_live(
    agent: LiteAgent,
    work: Callable[[CancelToken], T],
    renderer: LiveRenderer,
    *,
    reason: str = "interrupted (Ctrl-C)",
) -> T:
    """:func:`live` on an event loop of its own, for the one-shot commands."""
    return run_loop(lambda interrupts: live(agent, work, renderer, interrupts, reason=reason))
