"""Property: :class:`Outstanding` (whole entries as one record with a bitset, other units one
by one) answers as the plain map of unit to delivery it replaces, through every change."""

from __future__ import annotations

from math import inf

from hypothesis import given, settings
from hypothesis import strategies as st

from streamtx.broker.outstanding import Delivery, Outstanding, Stored, Unit, entry_units, unit_order
from streamtx.ledger import Position
from streamtx.records.partition import decode_header, encode_raw_batch

ops = st.lists(st.one_of(
    st.tuples(st.just("entry"), st.integers(1, 5), st.integers(0, 3)),  # size, deadline step
    st.tuples(st.just("first"), st.integers(1, 4), st.integers(0, 3)),  # an entry cut after this many
    st.tuples(st.just("unit"), st.integers(0, 60), st.integers(0, 3)),  # k-th unit ever made, step
    st.tuples(st.just("pop"), st.integers(0, 60), st.just(0)),
    st.tuples(st.just("take"), st.integers(0, 60), st.just(0)),
    st.tuples(st.just("expire"), st.integers(0, 3), st.just(0)),
), max_size=50)


def _stored(pos: Position, size: int) -> Stored:
    data = encode_raw_batch(b"", size, publish_time_ms=0)  # the record never reads the messages
    return Stored(0, pos, data, decode_header(data))


@settings(max_examples=300, deadline=None)
@given(ops)
def test_outstanding_answers_as_a_map_of_units(script: list[tuple[str, int, int]]) -> None:
    out, model = Outstanding(), {}  # model: unit → delivery, in insertion (deadline) order
    made: list[tuple[Unit, Delivery]] = []  # every unit of every entry made, with its delivery
    entry_id, clock = 0, 0.0
    for op, a, b in script:
        if op == "entry":
            clock += b
            pos = Position(1, entry_id)
            entry_id += 1
            d = Delivery("c", clock, _stored(pos, a), a)
            units = entry_units(pos, a)
            out.add_entry(pos, d)
            model.update(dict.fromkeys(units, d))
            made += [(u, d) for u in units]
        elif op == "first":
            clock += b
            pos = Position(1, entry_id)
            entry_id += 1
            d = Delivery("c", clock, _stored(pos, a + 1), a + 1)
            units = entry_units(pos, a + 1)
            out.add_range(pos, 0, a, d)  # all but the last: a fetch's limit cut the entry
            model.update(dict.fromkeys(units[:a], d))
            made += [(u, d) for u in units]
        elif op == "unit" and made:
            unit, d = made[a % len(made)]
            if unit in model:
                continue  # a unit is handed out again only once taken back
            clock += b
            d = Delivery("c2", clock, d.entry, d.batch_size, d.redeliveries + 1)
            out.add(unit, d)
            model[unit] = d
        elif op == "pop" and made:
            unit = made[a % len(made)][0]
            assert out.pop(unit) == model.pop(unit, None)
        elif op == "take" and made:
            pos, bi = made[a % len(made)][0]
            bound = (pos, inf if bi is None else bi)
            expected = [u for u in model if unit_order(u) <= bound]
            assert sorted(out.take_through(pos, bi), key=unit_order) == sorted(expected, key=unit_order)
            for u in expected:
                del model[u]
        elif op == "expire":
            now = clock - a
            expected = {u: d for u, d in model.items() if d.deadline <= now}
            assert dict(out.expire(now)) == expected
            for u in expected:
                del model[u]
        assert len(out) == len(model) and bool(out) == bool(model)
        assert list(out) == sorted(model, key=unit_order)
        for unit, _ in made:
            assert (unit in out) == (unit in model)
            assert out.get(unit) == model.get(unit)
        deadlines = [d.deadline for d in model.values()]
        assert out.next_deadline() == (min(deadlines) if deadlines else None)
