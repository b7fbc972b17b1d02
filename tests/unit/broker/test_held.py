"""Property: :class:`Held` (holds kept as entry records where a cumulative ack took whole
entries, unit by unit otherwise) answers and changes as a plain map of unit to holder does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamtx.broker.held import UNNAMED, Held
from streamtx.broker.outstanding import Taken, Unit, unit_order
from streamtx.contracts.txnid import TxnId
from streamtx.ledger import Position

SIZES = [1, 3, 1, 5, 2, 1]  # messages in the entry at Position(1, i)
TXNS = [TxnId(1, 1), TxnId(1, 2), TxnId(2, 7)]


def units_of(i: int) -> list[Unit]:
    pos = Position(1, i)
    return [(pos, None)] if SIZES[i] == 1 else [(pos, b) for b in range(SIZES[i])]


CANONICAL = [u for i in range(len(SIZES)) for u in units_of(i)]
# Ids the API also accepts: no batch index on a batch entry, index 0 on a one-message entry.
ODD = [(Position(1, 1), None), (Position(1, 0), 0)]
unit_st = st.sampled_from(CANONICAL + ODD)
txn_st = st.sampled_from(TXNS)

ops = st.lists(st.one_of(
    st.tuples(st.just("hold"), st.lists(unit_st, max_size=4), txn_st),
    st.tuples(st.just("take"), st.lists(st.sampled_from(CANONICAL), max_size=8), txn_st),
    st.tuples(st.just("restore"), unit_st, st.one_of(st.none(), txn_st)),
    st.tuples(st.just("pop"), unit_st, st.none()),
    st.tuples(st.just("end"), st.lists(unit_st, max_size=3), st.one_of(st.none(), txn_st)),
), max_size=30)


def check(held: Held, model: dict[Unit, TxnId]) -> None:
    assert len(held) == len(model) and bool(held) == bool(model)
    assert sorted(held, key=unit_order) == sorted(model, key=unit_order)
    for u in CANONICAL + ODD:
        assert held.get(u) == model.get(u) and (u in held) == (u in model)
    assert held.holders() == set(model.values())
    for t in TXNS:
        assert sorted(held.units_of(t), key=unit_order) == sorted(
            (u for u, h in model.items() if h == t), key=unit_order)
    for i, size in enumerate(SIZES):
        expected = sum(1 << (u[1] or 0) for u in units_of(i) if u in model)
        assert held.bits_at(Position(1, i), size) == expected
    for pos, bi in [*CANONICAL, *ODD]:
        reach = [u for u in model if u[0] < pos or (u[0] == pos and (bi is None or (u[1] or 0) <= bi))]
        first = held.first_through(pos, bi, Position(1, 0))
        assert (first is None) == (not reach) and (first is None or first in reach)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_held_is_a_map_of_unit_to_holder(script: list[tuple[str, object, object]]) -> None:
    held, model = Held(), {}
    for op, a, b in script:
        if op == "hold":
            listed = list(dict.fromkeys(a))  # type: ignore[call-overload]
            expected = [u for u in listed if model.get(u) != b]
            assert held.hold(a, b) == expected  # type: ignore[arg-type]
            model.update(dict.fromkeys(listed, b))
        elif op == "take":  # what a cumulative ack takes back is never held: those not held
            free = [u for u in dict.fromkeys(a) if u not in model]  # type: ignore[call-overload]
            records: dict[Position, int] = {}
            for pos, bi in free:
                records[pos] = records.get(pos, 0) | 1 << (bi or 0)
            sizes = {Position(1, i): n for i, n in enumerate(SIZES)}
            held.hold_taken(Taken([(p, sizes[p], bits) for p, bits in records.items()]), b)  # type: ignore[arg-type]
            model.update(dict.fromkeys(free, b))
        elif op == "restore":
            held.restore(a, b)  # type: ignore[arg-type]
            model.setdefault(a, UNNAMED if b is None else b)  # type: ignore[arg-type]
        elif op == "pop":
            assert held.pop(a) == model.pop(a, None)  # type: ignore[arg-type]
        else:
            listed = list(dict.fromkeys(a))  # type: ignore[call-overload]
            if b is None:
                expected = listed
            else:
                expected = [u for u in listed if model.get(u) in (b, UNNAMED)]
                expected += [u for u, h in model.items() if h == b and u not in expected]
            assert sorted(held.let_go(b, a, units=True), key=unit_order) == sorted(  # type: ignore[arg-type]
                expected, key=unit_order)
            for u in expected:
                model.pop(u, None)
        check(held, model)


def test_a_commit_lets_go_of_its_entries_and_leaves_the_others_holds() -> None:
    held = Held()
    a, b = TXNS[0], TXNS[1]
    held.hold_taken(Taken([(Position(1, 3), 5, 0b00111)], [(Position(1, 4), 0)]), a)
    held.hold_taken(Taken([(Position(1, 3), 5, 0b11000)]), b)  # the rest of the entry, by another
    assert held.let_go(a, [], units=False) == []
    assert sorted(held, key=unit_order) == [(Position(1, 3), 3), (Position(1, 3), 4)]
    assert held.get((Position(1, 3), 3)) == b and (Position(1, 4), 0) not in held
