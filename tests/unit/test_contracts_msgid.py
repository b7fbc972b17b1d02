"""The one message-id contract (issue 24 item 2): strict parse, the fast path, one formatter. Pure."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamtx.contracts.msgid import MessageId, format_id, parse_many
from streamtx.errors import MalformedError
from streamtx.ledger import Position
from streamtx.wire import batch as wire
from streamtx.wire.produce import message_ids

u64 = st.integers(0, (1 << 64) - 1)
ids = st.builds(MessageId, u64, u64, st.integers(-1, (1 << 31) - 1))

# Every spelling a lenient int() or split() let through before: a sign, whitespace, an
# underscore, a non-ASCII digit, a negative entry, a part too many or missing, out of range.
BAD = ["", "1", "1:", ":1", "1:2:", "1:2:3:4", "a:b", "L:1", "1: 1", " 1:2", "1:2 ", "+1:2", "1:+2",
       "1:-2", "-1:2", "1:2:-1", "1:2:+3", "1_0:2", "1:²", "1:2:³", f"{1 << 64}:1", f"1:{1 << 64}",
       f"1:2:{1 << 31}", "1" * 21 + ":1", "1:2\n"]


@pytest.mark.parametrize("text", BAD)
def test_malformed_ids_are_the_api_s_400(text: str) -> None:
    with pytest.raises(MalformedError) as got:
        MessageId.parse(text)
    assert got.value.status == 400 and got.value.code == "malformed"
    with pytest.raises(MalformedError):
        parse_many(["1:2:0", text])  # the fast path refuses the same
    with pytest.raises(ValueError):
        Position.parse(text)


@given(st.lists(ids, max_size=20))
def test_parse_and_format_round_trip_on_both_paths(mids: list[MessageId]) -> None:
    texts = [str(m) for m in mids]
    assert [MessageId.parse(t) for t in texts] == mids
    assert parse_many(texts) == mids
    assert [format_id(*m) for m in mids] == texts


def test_fast_path_reuses_an_entry_but_checks_each_index() -> None:
    assert parse_many(["7:3:0", "7:3:1", "7:3", "7:4"]) == [MessageId(7, 3, 0), MessageId(7, 3, 1),
                                                           MessageId(7, 3), MessageId(7, 4)]
    for tail in ("-1", "+1", " 1", "x", str(1 << 31)):
        with pytest.raises(MalformedError):
            parse_many(["7:3:0", f"7:3:{tail}"])


def test_binary_acks_stay_typed() -> None:
    sent = [MessageId(1, 2), MessageId(1, 3, 4)]
    got = wire.decode_acks(wire.encode_acks(sent, cumulative=True))
    assert got.ids == sent and all(type(m) is MessageId for m in got.ids)
    with pytest.raises(MalformedError):
        wire.encode_acks(["1:-2"])


def test_of_checks_range() -> None:
    assert MessageId.of(1, 2) == MessageId(1, 2, -1) and MessageId.of(1, 2, 0).batch_index == 0
    for bad in ((-1, 0, None), (0, -1, None), (0, 0, -2), (1 << 64, 0, None)):
        with pytest.raises(MalformedError):
            MessageId.of(*bad)


@given(u64, u64, st.integers(1, 50))
def test_the_wire_s_per_entry_formatting_is_the_one_formatter_s(ledger: int, entry: int, count: int) -> None:
    expected = [format_id(ledger, entry, None if count == 1 else i) for i in range(count)]
    assert message_ids(ledger, entry, range(count), count) == expected
