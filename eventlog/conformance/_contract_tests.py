"""Contract tests every checkpointer must pass (docs/architecture.md §4), one behaviour each."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .._contract import Checkpointer, Position, SessionInfo
from .._errors import (
    BlobNotFoundError,
    CheckpointConflictError,
    CheckpointerClosedError,
    CodecError,
    InvalidArgumentError,
    InvalidBlobRefError,
    InvalidEventError,
    InvalidSessionIdError,
    TruncateRangeError,
)
from .._events import AssistantMessage, OpaqueEvent, StoredEvent, UserPrompt
from .._fold import fold
from .._messages import TextBlock, ToolUseBlock
from ._util import Factory, prompt, prompts, texts

__all__ = ["ContractTests"]

BAD_SESSION_IDS: list[Any] = [
    "",
    "../x",
    "a/b",
    "x\x00y",
    ".hidden",
    "-x",
    "_x",
    "a" * 129,
    " a",
    "a b",
    "a\n",
    "é",
    5,
    None,
    b"abc",
]


class ContractTests:
    """The single-process contract. Subclasses implement :meth:`checkpointer_factory`."""

    def checkpointer_factory(self, path: Path) -> Factory:
        """Return a picklable zero-argument callable opening a checkpointer stored under
        ``path`` (an empty folder); every call must open the same store."""
        raise NotImplementedError

    @pytest.fixture
    def factory(self, tmp_path: Path) -> Factory:
        """The factory for this test's store."""
        return self.checkpointer_factory(tmp_path / "store")

    @pytest.fixture
    def cp(self, factory: Factory) -> Iterator[Checkpointer]:
        """A checkpointer, closed after the test."""
        c = factory()
        yield c
        c.close()

    # -- append and read ----------------------------------------------------------------------

    def test_append_returns_new_head(self, cp: Checkpointer) -> None:
        """append returns the head after the batch."""
        assert 3 == cp.append("s", prompts("a", "b", "c"))
        assert 4 == cp.append("s", prompts("d"))

    def test_read_returns_events_in_order_with_contiguous_seqs(self, cp: Checkpointer) -> None:
        """read yields every event, seq 1..n, with its kind and body."""
        cp.append("s", prompts("a", "b"))
        cp.append("s", prompts("c"))
        events = list(cp.read("s"))
        assert [1, 2, 3] == [e.seq for e in events]
        assert ["a", "b", "c"] == texts(events)
        assert ["user_prompt"] * 3 == [e.kind for e in events]
        assert all(isinstance(e, StoredEvent) and e.ts > 0 for e in events)

    def test_batch_shares_one_timestamp(self, cp: Checkpointer) -> None:
        """Events of one append share its timestamp; a later append has a later-or-equal one."""
        cp.append("s", prompts("a", "b"))
        cp.append("s", prompts("c"))
        a, b, c = cp.read("s")
        assert a.ts == b.ts <= c.ts

    def test_events_are_copied_not_shared(self, cp: Checkpointer) -> None:
        """Mutating a dict inside an appended event afterwards does not change the log."""
        tool_input: dict[str, Any] = {"cmd": "ls"}
        cp.append("s", [AssistantMessage(content=(ToolUseBlock("t1", "bash", tool_input),))])
        tool_input["cmd"] = "rm -rf /"
        (ev,) = cp.read("s")
        assert isinstance(ev.body, AssistantMessage)
        block = ev.body.content[0]
        assert isinstance(block, ToolUseBlock)
        assert {"cmd": "ls"} == block.input

    def test_empty_batch_writes_nothing(self, cp: Checkpointer) -> None:
        """An empty batch returns the head and creates no session."""
        assert 0 == cp.append("s", [])
        assert [] == cp.list()
        assert Position(0, 0) == cp.position("s")
        cp.append("s", prompts("a"))
        assert 1 == cp.append("s", [], expected_head=1)

    def test_empty_batch_still_checks_expectations(self, cp: Checkpointer) -> None:
        """An empty batch with a wrong expected_head raises a conflict."""
        cp.append("s", prompts("a"))
        with pytest.raises(CheckpointConflictError):
            cp.append("s", [], expected_head=0)

    def test_batch_with_a_non_event_writes_nothing(self, cp: Checkpointer) -> None:
        """A batch containing a non-event raises InvalidEventError; no event of it is stored."""
        cp.append("s", prompts("a"))
        bad: list[Any] = [prompt("b"), {"kind": "user_prompt"}, prompt("c")]
        with pytest.raises(InvalidEventError):
            cp.append("s", bad)
        assert ["a"] == texts(cp.read("s"))

    def test_batch_with_an_unencodable_event_writes_nothing(self, cp: Checkpointer) -> None:
        """A batch with a value msgpack cannot encode raises CodecError; nothing is stored."""
        cp.append("s", prompts("a"))
        bad = AssistantMessage(content=(ToolUseBlock("t", "x", {"n": 2**70}),))
        with pytest.raises(CodecError):
            cp.append("s", [prompt("b"), bad])
        assert ["a"] == texts(cp.read("s"))
        assert 1 == cp.head("s")

    def test_events_argument_must_be_iterable(self, cp: Checkpointer) -> None:
        """A single event or a string in place of a batch is refused."""
        for bad in (prompt("a"), "abc", None):
            with pytest.raises(InvalidEventError):
                cp.append("s", bad)  # type: ignore[arg-type]
        assert Position(0, 0) == cp.position("s")

    # -- since_seq ------------------------------------------------------------------------------

    def test_read_since_seq_is_exclusive(self, cp: Checkpointer) -> None:
        """read(since_seq=k) yields seqs strictly after k."""
        cp.append("s", prompts("a", "b", "c", "d"))
        assert [3, 4] == [e.seq for e in cp.read("s", 2)]
        assert [1, 2, 3, 4] == [e.seq for e in cp.read("s", 0)]

    def test_read_since_head_or_beyond_is_empty(self, cp: Checkpointer) -> None:
        """read from the head, or past it, yields nothing."""
        cp.append("s", prompts("a", "b"))
        assert [] == list(cp.read("s", 2))
        assert [] == list(cp.read("s", 100))

    def test_read_since_inside_a_batch(self, cp: Checkpointer) -> None:
        """since_seq may fall inside a batch; the rest of the batch is yielded."""
        cp.append("s", prompts("a", "b", "c"))
        cp.append("s", prompts("d", "e"))
        assert ["c", "d", "e"] == texts(cp.read("s", 2))
        assert ["e"] == texts(cp.read("s", 4))

    def test_read_rejects_bad_since_seq(self, cp: Checkpointer) -> None:
        """A negative or non-int since_seq raises InvalidArgumentError at the call."""
        for bad in (-1, 1.5, "1", True, None):
            with pytest.raises(InvalidArgumentError):
                cp.read("s", bad)  # type: ignore[arg-type]

    # -- unknown and empty sessions ------------------------------------------------------------

    def test_unknown_session_is_empty(self, cp: Checkpointer) -> None:
        """An unknown session has head 0, position (0, 0) and reads empty."""
        assert 0 == cp.head("nope")
        assert Position(0, 0) == cp.position("nope")
        assert [] == list(cp.read("nope"))
        assert [] == cp.list()

    def test_delete_unknown_session_is_a_noop(self, cp: Checkpointer) -> None:
        """Deleting an unknown session does nothing and creates nothing."""
        cp.delete("nope")
        assert [] == cp.list()

    # -- list -----------------------------------------------------------------------------------

    def test_list_orders_by_activity(self, cp: Checkpointer) -> None:
        """list() gives the most recently written session first."""
        cp.append("a", prompts("1"))
        time.sleep(0.05)
        cp.append("b", prompts("1"))
        time.sleep(0.05)
        cp.append("c", prompts("1"))
        time.sleep(0.05)
        cp.append("a", prompts("2"))
        infos = cp.list()
        assert ["a", "c", "b"] == [i.id for i in infos]
        assert all(isinstance(i, SessionInfo) for i in infos)
        assert infos[0].mtime >= infos[1].mtime >= infos[2].mtime

    def test_list_mtime_is_recent(self, cp: Checkpointer) -> None:
        """A session's mtime is the time of its last write, in Unix seconds."""
        before = time.time()
        cp.append("a", prompts("1"))
        (info,) = cp.list()
        assert before - 2 <= info.mtime <= time.time() + 2

    # -- delete ---------------------------------------------------------------------------------

    def test_delete_removes_events_and_record(self, cp: Checkpointer) -> None:
        """After delete the session is unknown; other sessions are untouched."""
        cp.append("a", prompts("1", "2"))
        cp.append("b", prompts("x"))
        cp.delete("a")
        assert Position(0, 0) == cp.position("a")
        assert [] == list(cp.read("a"))
        assert ["b"] == [i.id for i in cp.list()]
        assert ["x"] == texts(cp.read("b"))

    def test_recreated_session_starts_at_one_with_new_generation(self, cp: Checkpointer) -> None:
        """Delete-and-recreate restarts seqs at 1 and never reuses a generation."""
        seen = set()
        for round_ in range(4):
            cp.append("a", prompts(f"r{round_}"))
            pos = cp.position("a")
            assert 1 == pos.head
            assert pos.generation != 0
            seen.add(pos.generation)
            cp.delete("a")
        assert 4 == len(seen)

    # -- conflicts ------------------------------------------------------------------------------

    def test_append_with_stale_expected_head_conflicts(self, cp: Checkpointer) -> None:
        """A stale expected_head raises CheckpointConflictError naming session and heads."""
        cp.append("s", prompts("a", "b"))
        with pytest.raises(CheckpointConflictError) as info:
            cp.append("s", prompts("x"), expected_head=1)
        assert ("s", 1, 2) == (info.value.session_id, info.value.expected, info.value.actual)
        assert ["a", "b"] == texts(cp.read("s"))

    def test_append_with_current_expected_head_succeeds(self, cp: Checkpointer) -> None:
        """expected_head equal to the head lets the append through."""
        assert 1 == cp.append("s", prompts("a"), expected_head=0)
        assert 2 == cp.append("s", prompts("b"), expected_head=1)

    def test_expected_head_zero_on_existing_session_conflicts(self, cp: Checkpointer) -> None:
        """A writer that believes the session is new conflicts when it is not."""
        cp.append("s", prompts("a"))
        with pytest.raises(CheckpointConflictError):
            cp.append("s", prompts("b"), expected_head=0)

    def test_append_with_stale_generation_conflicts(self, cp: Checkpointer) -> None:
        """A wrong expected_generation raises a conflict and writes nothing."""
        cp.append("s", prompts("a"))
        head, gen = cp.position("s")
        with pytest.raises(CheckpointConflictError):
            cp.append("s", prompts("b"), expected_head=head, expected_generation=gen + 1)
        assert 2 == cp.append("s", prompts("b"), expected_head=head, expected_generation=gen)

    def test_new_session_has_generation_zero(self, cp: Checkpointer) -> None:
        """A writer may require a session to be new with expected_generation=0."""
        assert 1 == cp.append("s", prompts("a"), expected_generation=0)
        with pytest.raises(CheckpointConflictError):
            cp.append("s", prompts("b"), expected_generation=0)

    def test_no_aba_after_truncate_and_regrowth(self, cp: Checkpointer) -> None:
        """A writer that saw head 5 cannot append after a truncate to 3 and regrowth to 5."""
        cp.append("s", prompts("1", "2", "3", "4", "5"))
        stale = cp.position("s")
        cp.truncate("s", 3)
        cp.append("s", prompts("4'", "5'"))
        assert stale.head == cp.head("s")
        with pytest.raises(CheckpointConflictError):
            cp.append(
                "s", prompts("6"), expected_head=stale.head, expected_generation=stale.generation
            )
        with pytest.raises(CheckpointConflictError):
            cp.truncate("s", 1, expected_head=stale.head, expected_generation=stale.generation)
        assert ["1", "2", "3", "4'", "5'"] == texts(cp.read("s"))

    def test_no_aba_after_delete_and_recreate(self, cp: Checkpointer) -> None:
        """A writer that saw a session cannot append onto its deleted-and-recreated namesake."""
        cp.append("s", prompts("1", "2"))
        stale = cp.position("s")
        cp.delete("s")
        cp.append("s", prompts("a", "b"))
        with pytest.raises(CheckpointConflictError):
            cp.append("s", prompts("c"), expected_head=2, expected_generation=stale.generation)

    def test_expectations_reject_bad_types(self, cp: Checkpointer) -> None:
        """expected_head / expected_generation must be None or an int >= 0."""
        for bad in (-1, 1.0, "1", True):
            with pytest.raises(InvalidArgumentError):
                cp.append("s", prompts("a"), expected_head=bad)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgumentError):
                cp.append("s", prompts("a"), expected_generation=bad)  # type: ignore[arg-type]
        assert 0 == cp.head("s")

    # -- truncate -------------------------------------------------------------------------------

    def test_truncate_drops_later_events(self, cp: Checkpointer) -> None:
        """truncate(k) keeps seqs 1..k and returns k; appends continue at k+1."""
        cp.append("s", prompts("a", "b"))
        cp.append("s", prompts("c", "d", "e"))
        assert 3 == cp.truncate("s", 3)
        assert ["a", "b", "c"] == texts(cp.read("s"))
        assert 4 == cp.append("s", prompts("x"))
        assert ["a", "b", "c", "x"] == texts(cp.read("s"))
        assert [1, 2, 3, 4] == [e.seq for e in cp.read("s")]

    def test_truncate_changes_generation_every_time(self, cp: Checkpointer) -> None:
        """Every truncate of an existing session gives it a new, never reused generation."""
        cp.append("s", prompts("a", "b", "c"))
        gens = [cp.position("s").generation]
        for to in (3, 2, 2, 0):
            cp.truncate("s", to)
            gens.append(cp.position("s").generation)
        assert len(gens) == len(set(gens))

    def test_truncate_to_zero_keeps_an_empty_session(self, cp: Checkpointer) -> None:
        """truncate(0) empties the session; appends restart at seq 1."""
        cp.append("s", prompts("a", "b"))
        assert 0 == cp.truncate("s", 0)
        assert 0 == cp.head("s")
        assert [] == list(cp.read("s"))
        assert 1 == cp.append("s", prompts("z"))

    def test_truncate_beyond_head_raises(self, cp: Checkpointer) -> None:
        """to_seq beyond the head (or negative) raises TruncateRangeError; nothing changes."""
        cp.append("s", prompts("a", "b"))
        pos = cp.position("s")
        for bad in (3, 100, -1):
            with pytest.raises(TruncateRangeError):
                cp.truncate("s", bad)
        assert pos == cp.position("s")
        with pytest.raises(InvalidArgumentError):
            cp.truncate("s", 1.0)  # type: ignore[arg-type]

    def test_truncate_unknown_session(self, cp: Checkpointer) -> None:
        """truncate(unknown, 0) returns 0 and creates nothing; beyond 0 raises."""
        assert 0 == cp.truncate("nope", 0)
        assert [] == cp.list()
        with pytest.raises(TruncateRangeError):
            cp.truncate("nope", 1)

    def test_truncate_with_stale_expected_head_conflicts(self, cp: Checkpointer) -> None:
        """truncate honours expected_head and expected_generation; nothing changes on conflict."""
        cp.append("s", prompts("a", "b", "c"))
        pos = cp.position("s")
        with pytest.raises(CheckpointConflictError):
            cp.truncate("s", 1, expected_head=2)
        with pytest.raises(CheckpointConflictError):
            cp.truncate("s", 1, expected_head=3, expected_generation=pos.generation + 1)
        assert pos == cp.position("s")
        assert 1 == cp.truncate("s", 1, expected_head=3, expected_generation=pos.generation)

    def test_conflict_is_checked_before_range(self, cp: Checkpointer) -> None:
        """A stale writer gets a conflict even when its to_seq is also out of range."""
        cp.append("s", prompts("a"))
        with pytest.raises(CheckpointConflictError):
            cp.truncate("s", 5, expected_head=7)

    # -- reads racing truncates -------------------------------------------------------------------

    def test_read_interrupted_by_truncate_never_mixes_histories(self, cp: Checkpointer) -> None:
        """A read that is iterating while the log is truncated stops with a conflict and yields
        only events of the history it started on."""
        old = [f"old{i}" for i in range(10)]
        cp.append("s", prompts(*old))
        it = cp.read("s")
        seen = [next(it), next(it)]
        cp.truncate("s", 5)
        cp.append("s", prompts("new6", "new7", "new8"))
        with pytest.raises(CheckpointConflictError):
            seen.extend(it)
        assert old[: len(seen)] == texts(seen)

    def test_read_interrupted_by_delete_stops_with_conflict(self, cp: Checkpointer) -> None:
        """A read iterating while its session is deleted (and recreated) raises a conflict."""
        cp.append("s", prompts(*[f"old{i}" for i in range(10)]))
        it = cp.read("s")
        seen = [next(it)]
        cp.delete("s")
        cp.append("s", prompts("n1", "n2"))
        with pytest.raises(CheckpointConflictError):
            seen.extend(it)
        assert all(t.startswith("old") for t in texts(seen))

    def test_writes_proceed_while_a_read_is_half_consumed(self, cp: Checkpointer) -> None:
        """A half-consumed read holds no lock: appends and reads of the session go through."""
        cp.append("s", prompts("a", "b", "c"))
        it = cp.read("s")
        next(it)
        assert 4 == cp.append("s", prompts("d"))
        assert 4 == len(list(cp.read("s")))
        assert ["b", "c"] == texts([next(it), next(it)])

    # -- closed -----------------------------------------------------------------------------------

    def test_closed_checkpointer_refuses_every_call(self, factory: Factory) -> None:
        """After close() every method raises CheckpointerClosedError; close() is idempotent."""
        cp = factory()
        cp.append("s", prompts("a"))
        cp.close()
        cp.close()
        calls: list[Any] = [
            lambda: cp.append("s", prompts("b")),
            lambda: cp.read("s"),
            lambda: cp.head("s"),
            lambda: cp.position("s"),
            cp.list,
            lambda: cp.delete("s"),
            lambda: cp.truncate("s", 0),
            cp.check_integrity,
            lambda: cp.blobs,
        ]
        for call in calls:
            with pytest.raises(CheckpointerClosedError):
                call()
        assert cp.closed

    def test_iterator_of_a_closed_checkpointer_stops(self, factory: Factory) -> None:
        """A read iterator whose checkpointer is closed raises CheckpointerClosedError."""
        cp = factory()
        cp.append("s", prompts(*[str(i) for i in range(5000)]))
        it = cp.read("s")
        next(it)
        cp.close()
        with pytest.raises(CheckpointerClosedError):
            list(it)

    def test_context_manager_closes(self, factory: Factory) -> None:
        """Using a checkpointer as a context manager closes it on exit."""
        with factory() as cp:
            cp.append("s", prompts("a"))
        assert cp.closed

    # -- session ids ------------------------------------------------------------------------------

    @pytest.mark.parametrize("bad", BAD_SESSION_IDS, ids=repr)
    def test_bad_session_ids_are_refused_before_io(self, cp: Checkpointer, bad: Any) -> None:
        """Every method refuses an id outside [A-Za-z0-9][A-Za-z0-9._-]{0,127}."""
        calls: list[Any] = [
            lambda: cp.append(bad, prompts("a")),
            lambda: cp.read(bad),
            lambda: cp.head(bad),
            lambda: cp.position(bad),
            lambda: cp.delete(bad),
            lambda: cp.truncate(bad, 0),
        ]
        for call in calls:
            with pytest.raises(InvalidSessionIdError):
                call()
        assert [] == cp.list()

    def test_longest_and_dotted_ids_work(self, cp: Checkpointer) -> None:
        """Ids up to 128 characters with dots, dashes and underscores are fine."""
        ids = ["a" * 128, "a.b-c_d", "0", "x..y", "A.log", "b.lock", "c.tmp"]
        for sid in ids:
            cp.append(sid, prompts(sid))
        for sid in ids:
            assert [sid] == texts(cp.read(sid))
        assert sorted(ids) == sorted(i.id for i in cp.list())

    # -- unknown kinds ----------------------------------------------------------------------------

    def test_unknown_kind_round_trips_as_opaque(self, cp: Checkpointer) -> None:
        """An event of an unknown kind reads back as an OpaqueEvent with its exact bytes."""
        data = b"\x82\xa4kind\xa6future\xa1x\x01"
        cp.append("s", [prompt("a"), OpaqueEvent("future_kind", data), prompt("b")])
        events = list(cp.read("s"))
        assert OpaqueEvent("future_kind", data) == events[1].body
        assert "future_kind" == events[1].kind
        cp.append("t", [events[1].body])
        assert [OpaqueEvent("future_kind", data)] == [e.body for e in cp.read("t")]
        assert frozenset({"future_kind"}) == fold(events).unknown_kinds

    @pytest.mark.parametrize("kind", ["x\ud800", "a\nb", "k" * 129], ids=repr)
    def test_an_opaque_kind_no_store_can_keep_is_refused(self, cp: Checkpointer, kind: str) -> None:
        """An OpaqueEvent whose kind is not printable UTF-8 text of at most 128 characters is
        InvalidEventError, nothing of the batch is stored, and the session takes the next
        append (a file store raised UnicodeEncodeError, a SQLite store called the session
        damaged and refused every later write)."""
        cp.append("s", [prompt("a")])
        with pytest.raises(InvalidEventError):
            cp.append("s", [prompt("b"), OpaqueEvent(kind, b"\x01")])
        cp.append("s", [prompt("c")])
        assert ["a", "c"] == texts(cp.read("s"))
        assert cp.damaged("s") is None

    # -- integrity --------------------------------------------------------------------------------

    def test_integrity_of_a_healthy_store_is_ok(self, cp: Checkpointer) -> None:
        """check_integrity on undamaged sessions reports ok."""
        cp.append("a", prompts("1", "2"))
        cp.append("b", prompts("1"))
        cp.truncate("a", 1)
        report = cp.check_integrity()
        assert report.ok, report.detail

    # -- blobs ------------------------------------------------------------------------------------

    def test_blob_put_get_has(self, cp: Checkpointer) -> None:
        """A blob is stored under its SHA-256 ref and read back; put is idempotent."""
        data = b"hello world" * 1000
        ref = cp.blobs.put(data)
        assert "sha256:" + hashlib.sha256(data).hexdigest() == ref
        assert ref == cp.blobs.put(data)
        assert cp.blobs.has(ref)
        assert data == cp.blobs.get(ref)
        assert b"" == cp.blobs.get(cp.blobs.put(b""))

    def test_blob_errors(self, cp: Checkpointer) -> None:
        """Unknown refs, malformed refs and non-bytes data give clear errors."""
        missing = "sha256:" + "0" * 64
        assert not cp.blobs.has(missing)
        with pytest.raises(BlobNotFoundError):
            cp.blobs.get(missing)
        for bad in ("", "sha256:xyz", "../etc/passwd", "sha256:" + "A" * 64, None):
            with pytest.raises(InvalidBlobRefError):
                cp.blobs.get(bad)  # type: ignore[arg-type]
            with pytest.raises(InvalidBlobRefError):
                cp.blobs.has(bad)  # type: ignore[arg-type]
        for not_bytes in ("text", None, 5, ["x"]):
            with pytest.raises(InvalidArgumentError):
                cp.blobs.put(not_bytes)  # type: ignore[arg-type]

    def test_large_blob(self, cp: Checkpointer) -> None:
        """A 3 MiB blob round-trips."""
        data = bytes(range(256)) * (3 * 4096)
        assert data == cp.blobs.get(cp.blobs.put(data))

    # -- threads ----------------------------------------------------------------------------------

    def test_threads_appending_with_retry_lose_nothing(self, cp: Checkpointer) -> None:
        """4 threads appending to one session with expected_head and retry: the log is
        contiguous and holds each event exactly once."""
        per_thread = 40
        errors: list[BaseException] = []

        def worker(name: str) -> None:
            try:
                for i in range(per_thread):
                    while True:
                        head = cp.head("s")
                        try:
                            cp.append("s", prompts(f"{name}:{i}"), expected_head=head)
                            break
                        except CheckpointConflictError:
                            continue
            except BaseException as e:  # noqa: BLE001 -- reported by the assertion below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(f"t{n}",)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [] == errors
        events = list(cp.read("s"))
        assert list(range(1, 4 * per_thread + 1)) == [e.seq for e in events]
        expected = sorted(f"t{n}:{i}" for n in range(4) for i in range(per_thread))
        assert expected == sorted(texts(events))

    def test_prompt_body_type(self, cp: Checkpointer) -> None:
        """The body of a stored prompt is a UserPrompt with its text block."""
        cp.append("s", prompts("a"))
        (ev,) = cp.read("s")
        assert UserPrompt(content=(TextBlock("a"),)) == ev.body
