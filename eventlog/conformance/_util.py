"""Helpers shared by the conformance tests: small events that carry a recognizable text."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .._contract import Checkpointer
from .._events import StoredEvent, UserPrompt
from .._messages import TextBlock

__all__ = ["Factory", "KillSettling", "Settle", "prompt", "prompts", "texts"]

Factory = Callable[[], Checkpointer]
"""A picklable zero-argument callable that opens the store under test (the same store each
call, for durable backends)."""

Settle = Callable[[int], None]
"""Called with the pid of a process just killed: returns once the store has finished what
that process had sent it."""


class KillSettling:
    """The hook of the tests that kill a process with SIGKILL and then inspect the store."""

    def settle_after_kill(self, pid: int) -> None:
        """Wait until the store has finished what the killed process ``pid`` had sent it.

        A database server may still run, and commit, a transaction whose client is gone:
        PostgreSQL does when the client's ``COMMIT`` was already in its socket. A backend with a
        server overrides this to wait until that process's server sessions have ended, so that
        what the test then reads is final. The default (a store in files, which a killed
        process stops changing at once) has nothing to wait for."""


def prompt(text: str) -> UserPrompt:
    """A user prompt whose text identifies it."""
    return UserPrompt(content=(TextBlock(text),))


def prompts(*names: str) -> list[UserPrompt]:
    """One prompt per name."""
    return [prompt(n) for n in names]


def texts(events: Iterable[StoredEvent]) -> list[str]:
    """The prompt texts of ``events`` (``"?"`` for other kinds), in order."""
    return [e.body.text if isinstance(e.body, UserPrompt) else "?" for e in events]
