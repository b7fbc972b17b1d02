"""The mailbox's wire format: requests and answers survive the stream and the reply list."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamtx.ownership.mailbox import decode_answer, decode_call, encode_answer, encode_call
from streamtx.service.inprocess import Answer, Call

latin1 = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=20)
raw = latin1.map(lambda s: s.encode("latin-1"))
headers = st.lists(st.tuples(raw, raw), max_size=4)


@given(st.sampled_from(["GET", "POST"]), latin1, st.binary(max_size=40), headers, st.binary(max_size=200),
       st.integers(0, 2**50))
def test_a_call_round_trips(method: str, path: str, query: bytes, hdrs: list[tuple[bytes, bytes]],
                            body: bytes, deadline: int) -> None:
    call = Call(method, "/" + path, query, hdrs, body)
    assert decode_call(encode_call(call, "reply:1", deadline)) == (call, "reply:1", deadline)


@given(st.integers(100, 599), headers, st.binary(max_size=200))
def test_an_answer_round_trips_even_with_newlines_in_the_body(status: int, hdrs: list[tuple[bytes, bytes]],
                                                              body: bytes) -> None:
    answer = Answer(status, hdrs, b"\n" + body + b"\n")
    assert decode_answer(encode_answer(answer)) == answer
