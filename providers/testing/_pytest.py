"""The ``fake_messages_server`` pytest fixture: a fresh :class:`FakeMessagesServer` per test.

Register it once, in a ``conftest.py``::

    from liteagent.providers.testing import fake_messages_server  # noqa: F401

(or ``pytest_plugins = ["liteagent.providers.testing._pytest"]`` in the root conftest). Then::

    def test_hello(fake_messages_server: FakeMessagesServer) -> None:
        fake_messages_server.add(message([text("Hello")]))
        with fake_messages_server.client() as client:
            ...

This module imports pytest; the package imports it only when the fixture is asked for.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ._server import FakeMessagesServer

__all__ = ["fake_messages_server"]


@pytest.fixture
def fake_messages_server() -> Iterator[FakeMessagesServer]:
    """A fresh fake Messages API server on 127.0.0.1, closed when the test ends."""
    with FakeMessagesServer() as server:
        yield server
