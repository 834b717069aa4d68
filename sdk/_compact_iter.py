"""Following a compaction as it happens: :class:`CompactIterator` (blocking) and
:class:`AsyncCompactIterator` (asyncio), what ``iter_compact`` returns.

The compaction runs on the agent's operation pool; the iterator waits on a subscription to the
session's live events (a blocking wait, or an awaited one on the loop) and never polls. The
compaction's future closes that subscription when it completes, after every event it published, so
the iteration ends exactly when the compaction does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Generator
from types import TracebackType

from liteagent.actors._compactor import CompactStats
from liteagent.actors._hub import LiveEvent
from liteagent.actors._live import CompactionProgress
from liteagent.eventlog import CancelToken

from ._core import AgentCore
from ._futures import SETTLE_TIMEOUT, await_job, cancel_off_loop, retrieve, settle

__all__ = ["COMPACT_BUFFER", "AsyncCompactIterator", "CompactIterator"]

COMPACT_BUFFER = 4096  # the events an iterator buffers (a compaction publishes a few dozen)


class CompactIterator:
    """The progress of one compaction, started on the agent's pool (see
    :meth:`LiteAgent.iter_compact`): iterating waits on a subscription to its session's events,
    which the compaction's end closes, so the iteration ends exactly when the compaction does.
    """

    def __init__(
        self, core: AgentCore, session_id: str, instructions: str | None, cancel: CancelToken | None
    ) -> None:
        self.stats: CompactStats | None = None
        """The compaction's stats, once the iteration has ended without an error."""
        self.session_id = session_id
        self._token = cancel or CancelToken()
        self._sub = core.hub.subscribe(COMPACT_BUFFER, session_id=session_id)
        try:
            self._future = core.submit_operation(
                core.compact, session_id, instructions, self._token
            )
        except BaseException:
            self._sub.close()
            raise
        self._future.add_done_callback(lambda _: self._sub.close())
        self._events = self._follow()

    def _follow(self) -> Generator[CompactionProgress, None, None]:
        ended = False
        try:
            for item in self._sub:  # blocks until an event arrives or the compaction ends
                if isinstance(item, LiveEvent) and isinstance(item.event, CompactionProgress):
                    yield item.event
            ended = True
        finally:
            if not ended:  # the caller stopped early: stop the compaction too
                self._stop()
        self.stats = self._future.result()

    def _stop(self) -> None:
        if not self._future.done():
            self._future.cancel()  # one that has not started never starts
            self._token.cancel("the compaction's iterator was closed")
            settle(self._future)
        self._sub.close()

    def __iter__(self) -> CompactIterator:
        return self

    def __next__(self) -> CompactionProgress:
        return next(self._events)

    def close(self) -> None:
        """Stop following; a compaction still running is cancelled (see ``iter_compact``)."""
        self._events.close()
        self._stop()

    def __enter__(self) -> CompactIterator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncCompactIterator:
    """The progress of one compaction, started on the agent's pool (see
    :meth:`AsyncLiteAgent.iter_compact`): iterating awaits an :class:`AsyncSubscription` to its
    session's events, which the compaction's end closes, so the iteration ends exactly when the
    compaction does, raising what ``compact`` would; then ``stats`` holds its
    :class:`CompactStats`. Also an async context manager (leaving it early cancels)."""

    def __init__(
        self, core: AgentCore, session_id: str, instructions: str | None, cancel: CancelToken | None
    ) -> None:
        self.stats: CompactStats | None = None
        """The compaction's stats, once the iteration has ended without an error."""
        self.session_id = session_id
        self._core = core
        self._token = cancel or CancelToken()
        self._sub = core.hub.subscribe_async(COMPACT_BUFFER, session_id=session_id)
        try:
            self._future = core.submit_operation(
                core.compact, session_id, instructions, self._token
            )
        except BaseException:
            self._sub.close()
            raise
        self._future.add_done_callback(lambda _: self._sub.close())  # wakes the loop
        self._events = self._follow()

    async def _follow(self) -> AsyncGenerator[CompactionProgress, None]:
        ended = False
        try:
            async for item in self._sub:
                if isinstance(item, LiveEvent) and isinstance(item.event, CompactionProgress):
                    yield item.event
            ended = True
        finally:
            if not ended:  # cancelled, broken out of or closed: stop the compaction too
                await self._stop()
        # done already, unless the agent closed (its hub ended the subscription) first
        self.stats = await await_job(self._core, self._future, self._token)

    async def _stop(self) -> None:
        self._sub.close()
        if self._future.done():
            return
        self._future.cancel()  # one that has not started never starts
        cancel_off_loop(self._core, self._token, "the compaction's iterator was closed")
        inner = asyncio.wrap_future(self._future)
        inner.add_done_callback(retrieve)  # first: a second cancellation may end the wait
        await asyncio.wait({inner}, timeout=SETTLE_TIMEOUT)

    def __aiter__(self) -> AsyncCompactIterator:
        return self

    async def __anext__(self) -> CompactionProgress:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        """Stop following; a compaction still running is cancelled (and waited for, bounded)."""
        await self._events.aclose()
        await self._stop()

    async def __aenter__(self) -> AsyncCompactIterator:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
