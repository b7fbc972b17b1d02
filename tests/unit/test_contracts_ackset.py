"""Ack sets by origin (beyond PIP-33): built from a writer's cursor, found in another cluster's entries."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtx.contracts.ackset import AckSet, Ref

ORIGINS = [("a", 1), ("b", 7), ("c", 3)]
Case = tuple[list[Ref], set[Ref], list[Ref]]


@st.composite
def clusters(draw: st.DrawFn) -> Case:
    """A writer's entries (its local order), the ones it acknowledged, and a reader's entries.

    Every origin's stream is the same everywhere (ids with gaps: entries never sent);
    each cluster holds a prefix of each stream, interleaved in its own way.
    """
    streams = {o: sorted(draw(st.sets(st.integers(0, 60), max_size=12))) for o in ORIGINS}

    def holding() -> list[Ref]:
        prefixes = {o: s[: draw(st.integers(0, len(s)))] for o, s in streams.items()}
        order = draw(st.permutations([o for o, s in prefixes.items() for _ in s]))
        nxt = dict.fromkeys(prefixes, 0)
        out: list[Ref] = []
        for o in order:
            out.append((o[0], o[1], prefixes[o][nxt[o]]))
            nxt[o] += 1
        return out

    writer = holding()
    acked = {r for r in writer if draw(st.booleans())}
    return writer, acked, holding()


def runs_of(entries: list[Ref], acked: set[Ref]) -> list[list[Ref]]:
    """The runs of deleted entries a cursor holds: maximal, in local order."""
    runs: list[list[Ref]] = [[]]
    for r in entries:
        if r in acked:
            runs[-1].append(r)
        elif runs[-1]:
            runs.append([])
    return [r for r in runs if r]


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_reader_finds_exactly_the_acked_messages_it_holds(case: Case) -> None:
    writer, acked, reader = case
    acks = AckSet.build(runs_of(writer, acked), [])
    back = AckSet.from_wire(acks.to_wire())
    assert back == acks
    for ref in reader:
        assert back.lookup(ref) is (ref in acked), ref
    assert back.covers(acks) and acks.covers(back)
    assert bool(acks) is bool(acked)


def test_local_runs_give_origin_ranges_across_gaps_and_interleaving() -> None:
    # Writer a: a:10 a:11 b:5 a:14 (a:12, a:13 were never sent) | a:15 unacked | b:6 a:16
    runs = [[("a", 1, 10), ("a", 1, 11), ("b", 7, 5), ("a", 1, 14)], [("b", 7, 6), ("a", 1, 16)]]
    acks = AckSet.build(runs, [(("c", 3, 4), 3, 0b101)])
    assert acks.to_wire() == [
        {"cluster": "a", "ledger": 1, "ranges": [[10, 14], [16, 16]], "batches": []},
        {"cluster": "b", "ledger": 7, "ranges": [[5, 6]], "batches": []},
        {"cluster": "c", "ledger": 3, "ranges": [], "batches": [[4, 3, "5"]]},
    ]
    assert acks.lookup(("a", 1, 15)) is False
    assert acks.lookup(("a", 2, 11)) is False  # another ledger of the same cluster
    assert acks.lookup(("c", 3, 4)) == (3, 0b101)
    assert acks.last() == {("a", 1): 16, ("b", 7): 6, ("c", 3): 4}


def test_covers_and_union() -> None:
    old = AckSet.build([[("a", 1, 1), ("a", 1, 2)]], [(("a", 1, 5), 4, 0b0011)])
    assert old.covers(AckSet.build([[("a", 1, 2)]], [(("a", 1, 5), 4, 0b0001)]))
    assert not old.covers(AckSet.build([[("a", 1, 2), ("a", 1, 3)]], []))
    assert not old.covers(AckSet.build([], [(("a", 1, 5), 4, 0b0100)]))
    assert not old.covers(AckSet.build([[("b", 1, 1)]], []))
    new = AckSet.build([[("a", 1, 3)]], [(("a", 1, 5), 4, 0b0100), (("a", 1, 9), 2, 0b10)])
    both = old.union(new)
    assert both.ranges == {("a", 1): [(1, 3)]}
    assert both.batches == {("a", 1): {5: (4, 0b0111), 9: (2, 0b10)}}
    assert both.covers(old) and both.covers(new)
    # A batch later acknowledged whole is named by its range only.
    assert old.union(AckSet.build([[("a", 1, 5)]], [])).batches == {}


def test_a_big_batch_travels_as_hex() -> None:
    bits = (1 << 200) | 1
    acks = AckSet.build([], [(("a", 1, 4), 201, bits)])
    assert AckSet.from_wire(acks.to_wire()).lookup(("a", 1, 4)) == (201, bits)


@pytest.mark.parametrize("bad", [
    {"origins": "x"},
    [{"ledger": 1, "ranges": []}],
    [{"cluster": "a", "ledger": -1}],
    [{"cluster": "a", "ledger": True}],
    [{"cluster": "a", "ledger": 1, "ranges": [[5, 4]]}],
    [{"cluster": "a", "ledger": 1, "ranges": [[1]]}],
    [{"cluster": "a", "ledger": 1, "ranges": [[1, 1 << 64]]}],
    [{"cluster": "a", "ledger": 1, "batches": [[1, 2, "zz"]]}],
    [{"cluster": "a", "ledger": 1, "batches": [[1, 2, "4"]]}],  # bit 2 in a batch of 2
    [{"cluster": "a", "ledger": 1, "batches": [[1, 0, "0"]]}],
])
def test_bad_wire_forms_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        AckSet.from_wire(bad)
