"""PVec: the append-only persistent vector behind SessionState's sequences."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liteagent.eventlog._pvec import PVec


def test_empty_has_length_zero() -> None:
    """A new PVec with no items is empty."""
    assert 0 == len(PVec())


def test_built_from_items_holds_them_in_order() -> None:
    """PVec(items) holds the items in order."""
    assert [1, 2, 3] == list(PVec([1, 2, 3]))


def test_constructor_copies_its_input() -> None:
    """Changing the list a PVec was built from does not change the PVec."""
    source = [1, 2]
    v = PVec(source)
    source.append(3)
    assert [1, 2] == list(v)


def test_appended_adds_item_at_end() -> None:
    """appended returns a vector with the item at the end."""
    assert [1, 2, 3] == list(PVec([1, 2]).appended(3))


def test_appended_leaves_original_unchanged() -> None:
    """appended does not change the vector it was called on."""
    v = PVec([1, 2])
    v.appended(3)
    assert [1, 2] == list(v)


def test_branch_from_old_version_copies() -> None:
    """Appending to an older version gives a branch; neither branch sees the other's item."""
    v1 = PVec([1])
    v2 = v1.appended(2)
    v3 = v1.appended(3)
    assert ([1], [1, 2], [1, 3]) == (list(v1), list(v2), list(v3))


def test_branch_then_extend_both_branches() -> None:
    """Both branches of one version can keep growing independently."""
    base = PVec([0])
    a = base.appended(1)
    b = base.appended(2)
    a2 = a.appended(11)
    b2 = b.appended(22)
    assert ([0, 1, 11], [0, 2, 22], [0]) == (list(a2), list(b2), list(base))


def test_concurrent_appends_to_one_version_each_get_their_own_item() -> None:
    """Threads appending to the same version each get that version plus their own item."""
    base = PVec(list(range(100)))
    results: dict[int, list[int]] = {}
    barrier = threading.Barrier(8)

    def worker(i: int) -> None:
        barrier.wait()
        results[i] = list(base.appended(1000 + i))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {i: [*range(100), 1000 + i] for i in range(8)} == results


def test_equal_when_same_items() -> None:
    """Two vectors with the same items are equal, however they were built."""
    assert PVec([1, 2, 3]) == PVec([1]).appended(2).appended(3)


def test_not_equal_when_lengths_differ() -> None:
    """A vector is not equal to its own prefix."""
    v = PVec([1, 2])
    assert v != v.appended(3)


def test_not_equal_when_items_differ() -> None:
    """Vectors of the same length with different items are not equal."""
    assert PVec([1, 2]) != PVec([1, 3])


def test_shorter_version_not_equal_to_longer_sharing_storage() -> None:
    """An old version is not equal to a newer one that shares its storage."""
    v1 = PVec([1])
    v2 = v1.appended(2)
    assert (False, 1, 2) == (v1 == v2, len(v1), len(v2))


def test_not_equal_to_a_list() -> None:
    """A PVec does not compare equal to a list with the same items."""
    assert PVec([1, 2]) != [1, 2]


def test_equal_vectors_hash_equal() -> None:
    """Equal vectors have equal hashes."""
    assert hash(PVec([1, 2])) == hash(PVec([1]).appended(2))


def test_index_positive() -> None:
    """v[i] is the i-th item."""
    assert 20 == PVec([10, 20, 30])[1]


def test_index_negative() -> None:
    """v[-1] is the last item of this version, not of the shared storage."""
    v1 = PVec([10, 20])
    v1.appended(30)
    assert 20 == v1[-1]


def test_index_past_version_end_raises() -> None:
    """An index beyond this version's length raises even when the shared storage holds it."""
    v1 = PVec([10])
    v1.appended(20)
    with pytest.raises(IndexError):
        v1[1]


def test_index_too_negative_raises() -> None:
    """A negative index beyond the length raises IndexError."""
    with pytest.raises(IndexError):
        PVec([1, 2])[-3]


def test_index_on_empty_raises() -> None:
    """Indexing an empty vector raises IndexError."""
    with pytest.raises(IndexError):
        PVec()[0]


def test_slice() -> None:
    """A slice gives the items of that range."""
    assert [20, 30] == list(PVec([10, 20, 30, 40])[1:3])


def test_slice_with_negative_step() -> None:
    """A reversed slice gives the items in reverse."""
    assert [30, 20, 10] == list(PVec([10, 20, 30])[::-1])


def test_slice_of_old_version_does_not_see_newer_items() -> None:
    """Slicing an old version stops at that version's end."""
    v1 = PVec([1, 2])
    v1.appended(3)
    assert [2] == list(v1[-1:])


def test_iteration_of_old_version_stops_at_its_end() -> None:
    """Iterating an old version yields only its own items."""
    v1 = PVec([1, 2])
    v1.appended(3).appended(4)
    assert [1, 2] == list(iter(v1))


def test_replaced_last_replaces_last_item() -> None:
    """replaced_last gives a vector whose last item is the new one."""
    assert [1, 2, 9] == list(PVec([1, 2, 3]).replaced_last(9))


def test_replaced_last_leaves_original_unchanged() -> None:
    """replaced_last does not change the vector it was called on."""
    v = PVec([1, 2, 3])
    v.replaced_last(9)
    assert [1, 2, 3] == list(v)


def test_replaced_last_of_old_version_leaves_newer_unchanged() -> None:
    """replaced_last on an old version does not change a newer version sharing its storage."""
    v1 = PVec([1, 2])
    v2 = v1.appended(3)
    v1.replaced_last(9)
    assert [1, 2, 3] == list(v2)


def test_appended_after_replaced_last_is_independent() -> None:
    """Appending to a replaced_last result leaves the original and the result unchanged."""
    v = PVec([1, 2])
    r = v.replaced_last(9)
    r2 = r.appended(10)
    assert ([1, 2], [1, 9], [1, 9, 10]) == (list(v), list(r), list(r2))


def test_replaced_last_on_empty_raises() -> None:
    """replaced_last on an empty vector raises IndexError."""
    with pytest.raises(IndexError):
        PVec().replaced_last(1)


def test_sequence_mixins_respect_version_length() -> None:
    """`in`, index and count look only at this version's items."""
    v1 = PVec([1, 2])
    v1.appended(3)
    assert (False, 1, 0) == (3 in v1, v1.index(2), v1.count(3))


def test_repr_lists_items() -> None:
    """repr shows the items."""
    assert "PVec([1, 2])" == repr(PVec([1, 2]))


_ops = st.lists(
    st.tuples(st.sampled_from(["append", "replace"]), st.integers(0, 1000), st.integers()),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(initial=st.lists(st.integers(), max_size=5), ops=_ops)
def test_matches_list_model(initial: list[int], ops: list[tuple[str, int, int]]) -> None:
    """Every version built by any mix of appends and replacements matches a list model."""
    versions: list[tuple[PVec[int], list[int]]] = [(PVec(initial), list(initial))]
    for op, pick, item in ops:
        v, model = versions[pick % len(versions)]
        if op == "append":
            versions.append((v.appended(item), [*model, item]))
        elif model:
            versions.append((v.replaced_last(item), [*model[:-1], item]))
    for v, model in versions:
        assert model == list(v)
        assert len(model) == len(v)
        assert model == [v[i] for i in range(len(v))]
        assert model == [v[i] for i in range(-len(v), 0)]
        assert model[1:-1] == list(v[1:-1])
        assert PVec(model) == v
