"""The spread of items over members: total, exclusive, even, the same on every replica."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamtx.ownership import assign, share_of

names = st.text(alphabet="abcdefgh0123456789-", min_size=1, max_size=6)


@given(st.sets(st.integers(0, 500), max_size=60), st.sets(names, min_size=1, max_size=8))
def test_every_item_has_exactly_one_owner_and_shares_differ_by_at_most_one(items: set[int],
                                                                            members: set[str]) -> None:
    shares = assign(items, members)
    owned = [i for share in shares.values() for i in share]
    assert sorted(owned) == sorted(items)
    sizes = [len(s) for s in shares.values()]
    assert max(sizes) - min(sizes) <= 1
    assert set(shares) == members


@given(st.sets(st.integers(0, 500), max_size=60), st.lists(names, min_size=1, max_size=8, unique=True))
def test_every_replica_computes_the_same_answer_whatever_order_it_lists_members_in(
        items: set[int], members: list[str]) -> None:
    forward = {m: share_of(m, items, members) for m in members}
    backward = {m: share_of(m, reversed(sorted(items)), list(reversed(members))) for m in members}
    assert forward == backward


def test_a_member_not_in_the_list_owns_nothing_and_no_members_means_no_owner() -> None:
    assert share_of("z", [1, 2, 3], ["a", "b"]) == []
    assert assign([1, 2], []) == {}
