"""The slot of a subscription and its index entries (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamtx.pendingack.slots import decode_entry, encode_entry, subscription_slot


def test_a_subscription_has_the_same_slot_in_every_process() -> None:
    # CRC-32, not Python's per-process salted hash: a replica started later agrees.
    assert subscription_slot("persistent://t/n/x", "s", 16) == 13
    assert subscription_slot("persistent://t/n/x", "s", 1) == 0


def test_subscriptions_spread_over_the_slots() -> None:
    slots = [subscription_slot("persistent://t/n/x", f"sub-{i}", 16) for i in range(1600)]
    assert all(60 <= slots.count(s) <= 140 for s in range(16))


@given(st.text(min_size=1), st.text(min_size=1))
def test_index_entries_round_trip(topic: str, subscription: str) -> None:
    assert decode_entry(encode_entry((topic, subscription))) == (topic, subscription)


def test_an_index_entry_that_does_not_decode_names_nothing() -> None:
    for raw in (b"", b"\xff", b"[]", b'{"t": "x"}', b"null"):
        assert decode_entry(raw) is None
