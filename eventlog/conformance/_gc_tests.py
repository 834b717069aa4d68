"""Contract tests of the blob store's garbage-collection hooks and of ``collect_garbage``: in
one process (:class:`BlobCollectionTests`, part of ``CheckpointerConformance``) and with real
OS processes (:class:`DurableBlobCollectionTests`, part of ``DurableConformance``): a
collection racing another process's appends, and a collection killed with SIGKILL."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .._blobs import blob_ref
from .._branches import new_branch_id
from .._contract import Checkpointer
from .._errors import InvalidArgumentError, InvalidBlobRefError
from .._events import (
    BranchCreated,
    ContentArchived,
    FileSnapshot,
    OpaqueEvent,
    RestoreStarted,
    UserPrompt,
)
from .._gc import collect_garbage, referenced_blobs
from .._messages import TextBlock
from ._gc_processes import GARBAGE, run_gc_killed, run_gc_racing_appends
from ._util import Factory, KillSettling, prompts

__all__ = ["BlobCollectionTests", "DurableBlobCollectionTests", "all_referenced_present"]

_TICK = 0.05  # long enough for every store's clock to move on (file mtimes are coarse)


def snapshot(ref: str, call: str = "t1") -> FileSnapshot:
    """A file snapshot whose pre-image is ``ref``."""
    return FileSnapshot(path="a.txt", tool_call_id=call, pre_image=ref, pre_hash=ref[7:])


def all_referenced_present(cp: Checkpointer) -> set[str]:
    """Check that every blob any stored session references can be read back; return them."""
    refs: set[str] = set()
    for info in cp.list():
        refs |= referenced_blobs(cp, info.id)
    missing = sorted(r for r in refs if not cp.blobs.has(r))
    assert [] == missing, f"{len(missing)} referenced blobs are gone"
    for ref in refs:
        cp.blobs.get(ref)
    return refs


class BlobCollectionTests:
    """The hooks and the collection in one process. Needs the ``cp`` fixture of
    ContractTests."""

    def test_list_blobs_lists_every_blob_with_its_size_and_write_time(
        self, cp: Checkpointer
    ) -> None:
        """Each put blob is listed once, with its stored size and a write time of about
        now."""
        start = time.time()
        refs = {cp.blobs.put(b"x" * n) for n in (1, 10, 100)}
        cp.blobs.put(b"x")  # again: listed once
        infos = {b.ref: b for b in cp.blobs.list_blobs()}
        assert refs == set(infos)
        assert all(b.size > 0 for b in infos.values())
        assert all(start - 1 <= b.written <= time.time() + 1 for b in infos.values())

    def test_a_put_of_stored_content_and_a_touch_refresh_the_write_time(
        self, cp: Checkpointer
    ) -> None:
        """Putting content already stored, or touching its ref, sets its write time to now;
        a touch names the refs that are not stored."""
        ref = cp.blobs.put(b"content")
        (first,) = (b.written for b in cp.blobs.list_blobs() if b.ref == ref)
        time.sleep(_TICK)
        cp.blobs.put(b"content")
        (second,) = (b.written for b in cp.blobs.list_blobs() if b.ref == ref)
        assert second > first
        time.sleep(_TICK)
        absent = blob_ref(b"never stored")
        assert [absent] == cp.blobs.touch([ref, absent])
        (third,) = (b.written for b in cp.blobs.list_blobs() if b.ref == ref)
        assert third > second
        assert [] == cp.blobs.touch([])

    @pytest.mark.parametrize(
        "cutoff", ["x", b"x", None, True, float("nan"), float("inf"), [1.0]], ids=repr
    )
    def test_delete_blobs_refuses_a_cutoff_that_is_no_time_and_deletes_nothing(
        self, cp: Checkpointer, cutoff: object
    ) -> None:
        """A ``written_before`` that is not a finite number of seconds is an
        InvalidArgumentError, raised before anything is deleted or set aside (in SQL a text
        is greater than every number: SQLite used to delete a blob written a moment ago)."""
        ref = cp.blobs.put(b"kept")
        with pytest.raises(InvalidArgumentError):
            cp.blobs.delete_blobs([ref], written_before=cutoff)  # type: ignore[arg-type]
        assert (b"kept", [ref]) == (cp.blobs.get(ref), [b.ref for b in cp.blobs.list_blobs()])

    @pytest.mark.parametrize(
        "refs", [None, 5, "sha256:" + "0" * 64, [None], ["not a ref"]], ids=repr
    )
    def test_touch_and_delete_blobs_refuse_what_is_no_list_of_references(
        self, cp: Checkpointer, refs: object
    ) -> None:
        """``refs`` must be an iterable of references (one ``str`` is not): anything else is
        an InvalidArgumentError (or InvalidBlobRefError for a bad reference), and nothing is
        deleted."""
        ref = cp.blobs.put(b"kept")
        with pytest.raises((InvalidArgumentError, InvalidBlobRefError)):
            cp.blobs.touch(refs)  # type: ignore[arg-type]
        with pytest.raises((InvalidArgumentError, InvalidBlobRefError)):
            cp.blobs.delete_blobs(refs, written_before=time.time() + 60)  # type: ignore[arg-type]
        assert b"kept" == cp.blobs.get(ref)

    def test_delete_blobs_deletes_only_what_is_older_than_the_cutoff(
        self, cp: Checkpointer
    ) -> None:
        """A blob written before the cutoff is deleted; one written (or touched) at or after
        it is kept; unknown refs are skipped; the deleted refs are returned."""
        old = cp.blobs.put(b"old")
        time.sleep(_TICK)
        cutoff = time.time()
        time.sleep(_TICK)
        new = cp.blobs.put(b"new")
        touched = cp.blobs.put(b"touched before, touched again after")
        cp.blobs.touch([touched])
        unknown = blob_ref(b"unknown")
        deleted = cp.blobs.delete_blobs([old, new, touched, unknown], written_before=cutoff)
        assert [old] == deleted
        assert not cp.blobs.has(old)
        assert cp.blobs.has(new)
        assert cp.blobs.has(touched)
        assert cp.blobs.put(b"old") == old  # stored again after a delete
        assert b"old" == cp.blobs.get(old)

    def test_collect_garbage_keeps_every_referenced_blob(self, cp: Checkpointer) -> None:
        """References in any event kind (a snapshot, an archive, an event of an unknown kind,
        a prompt's text) keep their blobs; unreferenced blobs written before the collection
        started go, with grace 0."""
        kept = [cp.blobs.put(f"kept {i}".encode()) for i in range(4)]
        gone = [cp.blobs.put(f"gone {i}".encode()) for i in range(3)]
        cp.append("s", [snapshot(kept[0])])
        cp.append(
            "s", [ContentArchived(tool_use_id="t1", ref=kept[1], chars=6, size=6), *prompts("x")]
        )
        cp.append("t", [OpaqueEvent("from_the_future", b"\x81\xa3ref\xd9\x47" + kept[2].encode())])
        cp.append("t", [UserPrompt(content=(TextBlock(f"see {kept[3]}"),))])
        report = collect_garbage(cp, grace=0)
        assert (2, 4, 3) == (report.sessions, report.referenced, report.deleted)
        assert all(cp.blobs.has(r) for r in kept)
        assert not any(cp.blobs.has(r) for r in gone)
        assert report.freed_bytes > 0

    def test_collect_garbage_keeps_young_blobs_and_a_dry_run_changes_nothing(
        self, cp: Checkpointer
    ) -> None:
        """Unreferenced blobs written within the grace period stay; a dry run reports what
        would go and removes nothing."""
        stray = cp.blobs.put(b"stray")
        young = collect_garbage(cp, grace=3600)
        assert (0, 1) == (young.deleted, young.young)
        dry = collect_garbage(cp, grace=0, dry_run=True)
        assert (1, True) == (dry.deleted, dry.dry_run)
        assert cp.blobs.has(stray)

    def test_collect_garbage_prunes_branches(self, cp: Checkpointer) -> None:
        """Branches of a deleted session go; with a retention, old branches go, except one an
        interrupted restore still needs; the blobs only they referenced go with them."""
        refs = [cp.blobs.put(f"branch {i}".encode()) for i in range(3)]
        cp.append("origin", prompts("p1"))
        origins = ("deleted", "origin", "origin")
        orphan, old, needed = ids = [new_branch_id(s) for s in origins]
        for bid, origin, ref in zip(ids, origins, refs, strict=True):
            cp.append(bid, [BranchCreated(origin=origin, at_seq=2), snapshot(ref)])
        cp.append("origin", [RestoreStarted(to_seq=2, conversation=True, branch=needed)])
        time.sleep(_TICK)
        kept = collect_garbage(cp, grace=0)
        assert (orphan,) == kept.branches_deleted
        assert [False, True, True] == [cp.blobs.has(r) for r in refs]
        pruned = collect_garbage(cp, grace=0, branch_retention=0)
        assert (old,) == pruned.branches_deleted
        assert [False, False, True] == [cp.blobs.has(r) for r in refs]
        assert {"origin", needed} == {i.id for i in cp.list()}


class DurableBlobCollectionTests(KillSettling):
    """Collections racing other processes, and killed ones (a backend with a server overrides
    :meth:`settle_after_kill`)."""

    def checkpointer_factory(self, path: Path) -> Factory:
        """See :meth:`CheckpointerConformance.checkpointer_factory`."""
        raise NotImplementedError

    @pytest.mark.processes
    @pytest.mark.timeout(180)
    def test_gc_racing_appends_from_another_process(self, tmp_path: Path) -> None:
        """Another process appends events referencing blobs it puts (content that an earlier,
        deleted session referenced, so those blobs are old and unreferenced, or already
        collected, when it puts them again) while this one collects garbage over and over with
        a grace of half a second: after every collection no blob that a stored event
        references is missing, and the collections did delete garbage meanwhile."""
        factory = self.checkpointer_factory(tmp_path / "store")
        deleted = run_gc_racing_appends(factory, seconds=4.0, grace=0.5)
        assert deleted > 0, "the collections found no garbage to race over"
        with factory() as cp:
            assert all_referenced_present(cp)
            collect_garbage(cp, grace=0)
            assert all_referenced_present(cp)

    @pytest.mark.processes
    @pytest.mark.timeout(180)
    def test_sigkill_during_gc_removes_nothing_referenced(self, tmp_path: Path) -> None:
        """A collection killed at random moments never leaves a referenced blob missing;
        putting back what it set aside (``lite-agent doctor --repair``) and collecting again
        removes exactly the unreferenced blobs."""
        factory = self.checkpointer_factory(tmp_path / "store")
        outcomes = run_gc_killed(factory, rounds=7, seed=20261201, settle=self.settle_after_kill)
        assert any(0 < n < GARBAGE for n in outcomes), outcomes
