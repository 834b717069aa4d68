"""The file backend facing frames that are checksum-valid but say hostile things: a first seq
that skips, repeats or goes back, a count of zero or far too many, records of unknown kinds,
bodies that are not events, timestamps that are not numbers, payloads that are not records at
all. Randomized: whatever such a frame says, every operation returns or raises a
LiteAgentError, a read never returns seqs out of order, and repair() brings the session back
with its intact prefix."""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liteagent.eventlog import file_checkpointer, fold, zlib_codec
from liteagent.eventlog._frames import Record, build_frame, encode_records
from liteagent.eventlog.conformance import prompts, texts
from liteagent.eventlog.errors import CodecError, LiteAgentError

SID = "s"
_PREFIX = ["p0", "p1", "p2"]  # seqs 1-3, one frame each

_prompt_body = msgspec.Raw(
    msgspec.msgpack.encode({"content": [{"type": "text", "text": "x"}], "kind": "user_prompt"})
)
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=8)),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
_bodies = st.one_of(
    st.just(_prompt_body),
    _json.map(lambda v: msgspec.Raw(msgspec.msgpack.encode(v))),
)
_kinds = st.one_of(
    st.sampled_from(["user_prompt", "assistant_message", "tool_result", "turn_aborted", "", "?"]),
    st.text(max_size=12),
)
_ts = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.just(math.nan))
_records = st.lists(st.builds(Record, ts=_ts, kind=_kinds, body=_bodies), max_size=4)
_payloads = st.one_of(
    _records.map(lambda rs: encode_records(rs, None)),
    st.binary(max_size=64),
    st.builds(msgspec.msgpack.encode, st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3)),
)
_first_seqs = st.one_of(st.sampled_from([0, 1, 2, 3, 4, 5, 2**32, 2**63 - 1, 2**64 - 1]))
_counts = st.one_of(st.integers(0, 6), st.sampled_from([2**31, 2**32 - 1]))


def _store(root: Path) -> None:
    with file_checkpointer(root) as cp:
        for text in _PREFIX:
            cp.append(SID, prompts(text))


def _attempt(fn: Callable[[], object]) -> object:
    """Run ``fn``; a LiteAgentError is an answer too. Anything else fails the test."""
    try:
        return fn()
    except LiteAgentError as e:
        return e


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    frames=st.lists(st.tuples(_payloads, _first_seqs, _counts), min_size=1, max_size=2),
    trailing=st.binary(max_size=8),
)
def test_checksum_valid_hostile_frames(
    frames: list[tuple[bytes, int, int]], trailing: bytes
) -> None:
    """Hostile frames after an intact prefix: reads, appends, integrity checks and folds answer
    with a result or a LiteAgentError; repair keeps the prefix and the session works again."""
    root = Path(tempfile.mkdtemp(prefix="frames-"))
    try:
        _store(root)
        log = root / f"{SID}.log"
        with log.open("ab") as f:
            for payload, first, count in frames:
                f.write(build_frame(payload, first, count))
            f.write(trailing)
        with file_checkpointer(root) as cp:
            read = _attempt(lambda: list(cp.read(SID)))
            if isinstance(read, list):
                seqs = [e.seq for e in read]
                assert list(range(1, len(seqs) + 1)) == seqs
                _attempt(lambda: fold(read))
            _attempt(lambda: cp.position(SID))
            _attempt(lambda: cp.head(SID))
            _attempt(cp.list)
            report = cp.check_integrity()
            _attempt(lambda: cp.append(SID, prompts("next")))
            repaired = cp.repair(SID)
            after = list(cp.read(SID))
            assert _PREFIX == texts(after)[:3]
            head = cp.head(SID)
            assert head + 1 == cp.append(SID, prompts("after repair"), expected_head=head)
            assert cp.check_integrity().ok
        assert report.ok or repaired.repaired or isinstance(read, LiteAgentError)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("first", [0, 1, 3, 5])
def test_a_frame_that_does_not_continue_the_seqs_is_damage(tmp_path: Path, first: int) -> None:
    """A checksum-valid frame whose first seq is not head + 1 is damage, not events."""
    _store(tmp_path)
    with (tmp_path / f"{SID}.log").open("ab") as f:
        f.write(
            build_frame(encode_records([Record(0.0, "user_prompt", _prompt_body)], None), first, 1)
        )
    with file_checkpointer(tmp_path) as cp:
        read = _attempt(lambda: list(cp.read(SID)))
        assert isinstance(read, LiteAgentError)
        assert not cp.check_integrity().ok


def test_a_frame_whose_events_do_not_decode_is_repaired_as_damage(tmp_path: Path) -> None:
    """Seq 4 in a checksum-valid frame whose body is not a user_prompt: reads raise CodecError
    naming seq 4; repair quarantines that frame (seqs 1-3 kept) and the session works again."""
    _store(tmp_path)
    bad = msgspec.Raw(msgspec.msgpack.encode(None))
    with (tmp_path / f"{SID}.log").open("ab") as f:
        f.write(build_frame(encode_records([Record(0.0, "user_prompt", bad)], None), 4, 1))
    with file_checkpointer(tmp_path) as cp:
        with pytest.raises(CodecError) as caught:
            list(cp.read(SID))
        assert 4 == caught.value.seq
        report = cp.repair(SID)
        assert (True, 3, ((4, 4),)) == (report.repaired, report.kept_head, report.lost)
        assert "do not decode" in report.detail
        assert _PREFIX == texts(cp.read(SID))
        assert 4 == cp.append(SID, prompts("next"), expected_head=3)


def test_repair_with_the_wrong_codec_changes_nothing(tmp_path: Path) -> None:
    """A store written with zlib_codec opened without it: reads raise CodecError, and repair
    refuses with CodecError instead of quarantining events it merely cannot decode."""
    with file_checkpointer(tmp_path, codec=zlib_codec()) as cp:
        for text in _PREFIX:
            cp.append(SID, prompts(text))
    before = (tmp_path / f"{SID}.log").read_bytes()
    with file_checkpointer(tmp_path) as cp:
        with pytest.raises(CodecError):
            list(cp.read(SID))
        with pytest.raises(CodecError, match="repair changed nothing"):
            cp.repair(SID)
    assert before == (tmp_path / f"{SID}.log").read_bytes()
    assert [] == list(tmp_path.glob("*quarantine*"))
    with file_checkpointer(tmp_path, codec=zlib_codec()) as cp:
        assert _PREFIX == texts(cp.read(SID))
