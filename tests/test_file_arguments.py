"""Wrong types and extreme values fed to every public entry point of the file backend and its
blob store: only liteagent's own errors may come out (hypothesis)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liteagent.eventlog import Checkpointer, file_checkpointer, zlib_codec
from liteagent.eventlog.conformance import prompts
from liteagent.eventlog.errors import LiteAgentError
from liteagent.eventlog.types import TextBlock, UserPrompt

_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([0, 1, -1, 2**63 - 1, 2**63, 2**64, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["s", "s1", "\udcff", "a\0b", "../x", "a" * 200, "sha256:" + "0" * 64]),
    st.binary(max_size=20),
)
_anything = st.one_of(
    _scalars,
    st.lists(_scalars, max_size=3),
    st.dictionaries(st.text(max_size=3), _scalars, max_size=2),
    st.builds(object),
)
_events = st.one_of(
    _anything,
    st.lists(
        st.one_of(
            _anything,
            st.builds(lambda t: UserPrompt(content=(TextBlock(t),)), st.text(max_size=10)),
        ),
        max_size=3,
    ),
)


@pytest.fixture(scope="module")
def store() -> Iterator[Checkpointer]:
    """One file store for every example (sessions s and s1 hold a few events)."""
    with tempfile.TemporaryDirectory() as root, file_checkpointer(root) as cp:
        cp.append("s", prompts("a", "b"))
        cp.append("s1", prompts("c"))
        yield cp


def _only_library_errors(call: Callable[[], Any]) -> None:
    try:
        result = call()
        if isinstance(result, Iterator):
            list(result)
    except LiteAgentError:
        pass


@_SETTINGS
@given(sid=_anything, events=_events, extra=st.tuples(_anything, _anything, _anything))
def test_append_raises_only_library_errors(
    store: Checkpointer, sid: Any, events: Any, extra: tuple[Any, Any, Any]
) -> None:
    """append with any arguments returns a head or raises a LiteAgentError."""
    head, generation, ts = extra
    _only_library_errors(
        lambda: store.append(sid, events, head, expected_generation=generation, ts=ts)
    )


@_SETTINGS
@given(sid=_anything, since=_anything)
def test_read_raises_only_library_errors(store: Checkpointer, sid: Any, since: Any) -> None:
    """read (iterated to the end) with any arguments raises only LiteAgentError."""
    _only_library_errors(lambda: store.read(sid, since))


@_SETTINGS
@given(sid=_anything, to=_anything, head=_anything, generation=_anything)
def test_truncate_raises_only_library_errors(
    store: Checkpointer, sid: Any, to: Any, head: Any, generation: Any
) -> None:
    """truncate with any arguments raises only LiteAgentError."""
    _only_library_errors(lambda: store.truncate(sid, to, head, expected_generation=generation))


@_SETTINGS
@given(sid=_anything, method=st.sampled_from(["position", "head", "delete", "repair", "damaged"]))
def test_session_methods_raise_only_library_errors(
    store: Checkpointer, sid: Any, method: str
) -> None:
    """position, head, delete, repair and damaged with any session id raise only
    LiteAgentError."""
    _only_library_errors(lambda: getattr(store, method)(sid))


@_SETTINGS
@given(value=_anything, method=st.sampled_from(["put", "get", "has"]))
def test_blob_methods_raise_only_library_errors(
    store: Checkpointer, value: Any, method: str
) -> None:
    """blobs.put, get and has with any argument raise only LiteAgentError."""
    _only_library_errors(lambda: getattr(store.blobs, method)(value))


@settings(max_examples=200, deadline=None)
@given(
    root=_anything,
    durability=st.one_of(_anything, st.sampled_from(["normal", "full"])),
    codec=st.one_of(_anything, st.just(zlib_codec())),
    workdir=_anything,
    home=_anything,
)
def test_constructor_raises_only_library_errors(
    root: Any, durability: Any, codec: Any, workdir: Any, home: Any
) -> None:
    """file_checkpointer with any arguments opens a store or raises a LiteAgentError (a str
    root is made relative to a temp folder, so nothing is created elsewhere)."""
    with tempfile.TemporaryDirectory() as tmp:
        if isinstance(root, str) and "\0" not in root:
            root = Path(tmp) / "r" / root.lstrip("/")
        if isinstance(home, str):
            home = Path(tmp) / "h"
        try:
            cp = file_checkpointer(
                root, durability=durability, codec=codec, workdir=workdir, home=home
            )
        except LiteAgentError:
            return
        cp.close()


@settings(max_examples=100, deadline=None)
@given(level=_anything)
def test_zlib_codec_raises_only_library_errors(level: Any) -> None:
    """zlib_codec with any level returns a codec or raises a LiteAgentError."""
    _only_library_errors(lambda: zlib_codec(level))
