"""Waiting on liteagent's futures, blocking or from asyncio, and cancelling their work.

The asyncio side costs the loop one loop future and one thread-safe wake-up per wait: the thread
that completes a job's future posts its outcome to the loop, which never blocks on it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from functools import partial
from typing import TYPE_CHECKING, Any

from liteagent.eventlog import CancelToken
from liteagent.eventlog.errors import LiteAgentError

if TYPE_CHECKING:
    from liteagent.actors._reply import Reply

    from ._core import AgentCore

__all__ = [
    "SETTLE_TIMEOUT",
    "await_job",
    "await_reply",
    "cancel_off_loop",
    "post",
    "resolve",
    "retrieve",
    "settle",
]

SETTLE_TIMEOUT = 60.0  # how long a cancelled call waits for its work to stop


def settle(reply: Reply | concurrent.futures.Future[Any]) -> None:
    """Wait (bounded) for cancelled work to finish recording how it ended."""
    with contextlib.suppress(concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
        reply.exception(SETTLE_TIMEOUT)


def cancel_off_loop(core: AgentCore, token: CancelToken, reason: str) -> None:
    """Fire ``token`` off the loop (its callbacks may close sockets)."""
    try:
        core.host.call_soon(partial(token.cancel, reason))
    except LiteAgentError:  # the agent is closed: nothing runs any more
        token.cancel(reason)


async def await_job(
    core: AgentCore, future: concurrent.futures.Future[Any], token: CancelToken | None = None
) -> Any:
    """Await ``future`` of the agent's pool; when the awaiting task is cancelled, a job that has
    not started never starts, and one that has gets ``token`` cancelled and is waited for
    (bounded). One loop future and one thread-safe wake-up per call (``wrap_future`` plus
    ``shield`` cost several times that on the loop)."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[Any] = loop.create_future()
    future.add_done_callback(partial(_wake, loop, waiter))
    try:
        return await waiter
    except asyncio.CancelledError:
        future.cancel()  # a job that has not started never starts
        inner = asyncio.wrap_future(future)
        inner.add_done_callback(retrieve)  # first: a second cancellation may end the wait
        if token is not None:
            cancel_off_loop(core, token, "the awaiting task was cancelled")
            if not future.done():
                await asyncio.wait({inner}, timeout=SETTLE_TIMEOUT)
        raise


def post(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    """Run ``fn(*args)`` on ``loop`` from another thread (nothing once the loop is closed)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


def resolve(waiter: asyncio.Future[None], error: BaseException | None = None) -> None:
    """On the loop: complete ``waiter`` unless its awaiting task gave up on it."""
    if waiter.done():
        return
    if error is None:
        waiter.set_result(None)
    else:
        waiter.set_exception(error)


async def await_reply(reply: Reply) -> Any:
    """Await a send's reply; when the awaiting task is cancelled, interrupt the send (out of
    the queue, or its turn cancelled) and wait, bounded, until it has settled. One loop future
    and one thread-safe wake-up: the loop's share of a send stays small when thousands start
    at once."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[Any] = loop.create_future()
    reply.add_done_callback(partial(_wake, loop, waiter))
    try:
        return await waiter
    except asyncio.CancelledError:
        reply.interrupt("the awaiting task was cancelled")  # posted to the host's thread
        if not reply.done():
            settled: asyncio.Future[Any] = loop.create_future()
            settled.add_done_callback(retrieve)  # first: a second cancellation may end the wait
            reply.add_done_callback(partial(_wake, loop, settled))
            await asyncio.wait({settled}, timeout=SETTLE_TIMEOUT)
        raise


def _wake(
    loop: asyncio.AbstractEventLoop,
    waiter: asyncio.Future[Any],
    future: concurrent.futures.Future[Any] | Reply,
) -> None:
    """In the thread that completed ``future``: hand its outcome to ``waiter`` on the loop."""
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        loop.call_soon_threadsafe(_hand_over, waiter, future)


def _hand_over(waiter: asyncio.Future[Any], future: concurrent.futures.Future[Any] | Reply) -> None:
    if waiter.done():  # the awaiting task was cancelled
        return
    if future.cancelled():
        waiter.cancel()
    elif (error := future.exception()) is not None:
        waiter.set_exception(error)
    else:
        waiter.set_result(future.result())


def retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a late outcome as seen (nobody awaits it any more)."""
    if not future.cancelled():
        future.exception()
