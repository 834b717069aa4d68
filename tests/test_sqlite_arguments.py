"""Wrong types and extreme values fed to the SQLite backend: bad arguments are refused with
InvalidArgumentError before anything is created, and hypothesis feeds every public entry point
of the checkpointer and its blob store (on a file and in memory) values of every kind: only
liteagent's own errors may come out."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liteagent.eventlog import Checkpointer, sqlite_checkpointer
from liteagent.eventlog.conformance import prompts
from liteagent.eventlog.errors import InvalidArgumentError, LiteAgentError, StorageIOError
from liteagent.eventlog.types import TextBlock, UserPrompt

# -- the factory and the blob store refuse bad arguments -------------------------------------------

BAD_FACTORY_ARGS = {
    "file None": {"file": None},
    "file int": {"file": 5},
    "file bytes": {"file": b"log.db"},
    "file empty": {"file": ""},
    "file with NUL": {"file": "lo\x00g.db"},
    "file lone surrogate": {"file": "log\udcff.db"},
    "synchronous int": {"synchronous": 1},
    "synchronous None": {"synchronous": None},
    "synchronous list": {"synchronous": ["normal"]},
    "busy_timeout_ms bool": {"busy_timeout_ms": True},
    "busy_timeout_ms float": {"busy_timeout_ms": 5.0},
    "busy_timeout_ms 2**31": {"busy_timeout_ms": 2**31},
    "busy_timeout_ms huge": {"busy_timeout_ms": 2**70},
    "integrity_check_on_open str": {"integrity_check_on_open": "yes"},
    "integrity_check_on_open int": {"integrity_check_on_open": 1},
}


@pytest.mark.parametrize("kwargs", BAD_FACTORY_ARGS.values(), ids=BAD_FACTORY_ARGS.keys())
def test_bad_factory_argument_is_invalid_argument(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any]
) -> None:
    """sqlite_checkpointer refuses a wrong type or value with InvalidArgumentError (not a raw
    TypeError, ValueError or OverflowError) and creates nothing."""
    monkeypatch.chdir(tmp_path)
    args = {"file": tmp_path / "sub" / "log.db", **kwargs}
    file = args.pop("file")
    with pytest.raises(InvalidArgumentError):
        sqlite_checkpointer(file, **args)
    assert [] == list(tmp_path.iterdir())


@pytest.mark.parametrize("data", ["text", None, 5, ["b"]], ids=["str", "None", "int", "list"])
def test_blob_put_of_non_bytes_is_invalid_argument(tmp_path: Path, data: Any) -> None:
    """blobs.put of anything but bytes raises InvalidArgumentError (not TypeError)."""
    with sqlite_checkpointer(tmp_path / "log.db") as cp, pytest.raises(InvalidArgumentError):
        cp.blobs.put(data)


# -- hypothesis: only library errors ---------------------------------------------------------------

_SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([0, 1, -1, 2**63 - 1, 2**63, 2**64, -(2**63), 2**31, 2**32]),
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


@pytest.fixture(scope="module", params=["file", "memory"])
def store(request: pytest.FixtureRequest) -> Iterator[Checkpointer]:
    """One store for every example (sessions s and s1 hold a few events)."""
    with tempfile.TemporaryDirectory() as root:
        file = Path(root) / "log.db" if request.param == "file" else ":memory:"
        with sqlite_checkpointer(file) as cp:
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


@settings(max_examples=150, deadline=None)
@given(
    file=_anything,
    synchronous=st.one_of(_anything, st.sampled_from(["normal", "full"])),
    busy=st.one_of(_anything, st.integers(min_value=0, max_value=10_000)),
    check=st.one_of(_anything, st.booleans()),
)
def test_constructor_raises_only_library_errors(
    file: Any, synchronous: Any, busy: Any, check: Any
) -> None:
    """sqlite_checkpointer with any arguments opens a store or raises a LiteAgentError (a str
    file is made relative to a temp folder, so nothing is created elsewhere)."""
    with tempfile.TemporaryDirectory() as tmp:
        if isinstance(file, str) and file != ":memory:":
            file = Path(tmp) / "d" / file.replace("/", "_")[:100]
        try:
            cp = sqlite_checkpointer(
                file,
                synchronous=synchronous,
                busy_timeout_ms=busy,
                integrity_check_on_open=check,
            )
        except LiteAgentError:
            return
        cp.close()


def test_a_file_that_cannot_be_a_database_file_is_refused_by_name(tmp_path: Path) -> None:
    """A folder given as the file, or a path through a file, is refused with StorageIOError
    naming the path (not "[Errno 5] Input/output error" without it); nothing is created."""
    (tmp_path / "plain").write_text("not a folder")
    with pytest.raises(StorageIOError, match="is a folder, not a database file"):
        sqlite_checkpointer(tmp_path)
    with pytest.raises(StorageIOError, match="a part of its folder is a file"):
        sqlite_checkpointer(tmp_path / "plain" / "sub" / "log.db")
    assert ["plain"] == [p.name for p in tmp_path.iterdir()]
    with pytest.raises(StorageIOError, match="cannot make the folder of '/proc/"):
        sqlite_checkpointer("/proc/no-such-liteagent-folder/log.db")  # /proc refuses a mkdir
