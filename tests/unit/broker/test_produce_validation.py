"""The produce route's hand-written checks accept exactly what its documented models accept.

The hot route parses its body with one orjson call and checks it by hand (a
pydantic model per message was a fifth of the broker's CPU); OpenAPI documents
``ProduceRequest``. This property test is what keeps the two one source: any
body, valid or not, gets the same verdict from both.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from streamtx.broker.routes.messages import ProduceRequest, _message, _parse_body
from streamtx.errors import MalformedError

junk = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([1.0, 0.5, -1.0, 1e300]),
                 st.text(max_size=4), st.lists(st.integers(-9, 9), max_size=2),
                 st.dictionaries(st.text(max_size=2), st.integers(-9, 9), max_size=2))
b64 = st.binary(max_size=8).map(lambda b: base64.b64encode(b).decode())
texts = st.one_of(st.text(max_size=6), st.sampled_from(["", "é", "k"]))
txn_ids = st.one_of(st.sampled_from(["1:2", "0:0", f"{2**64 - 1}:7", "1_0:2", " 1:2", "+1:2", "²:1", "1:"]),
                    texts)
messages = st.fixed_dictionaries({}, optional={
    "key": st.one_of(st.none(), texts, junk),
    "value": st.one_of(b64, st.sampled_from(["", "a", "YQ", "YQ==", "!!!!", "YQ==\n"]), junk),
    "properties": st.one_of(st.none(), st.dictionaries(texts, texts, max_size=2),
                            st.dictionaries(texts, junk, max_size=2), junk),
    "partition": st.one_of(st.none(), st.integers(-2, 5), junk),
    "extra": junk,
})
producers = st.fixed_dictionaries({}, optional={
    "name": st.one_of(texts, junk), "epoch": st.one_of(st.integers(-1, 3), junk),
    "sequence": st.one_of(st.integers(-1, 3), junk),
})
bodies = st.one_of(
    junk,
    st.fixed_dictionaries({}, optional={
        "messages": st.one_of(st.lists(st.one_of(messages, junk), max_size=3), junk),
        "txn_id": st.one_of(st.none(), txn_ids, junk),
        "producer": st.one_of(st.none(), producers, junk),
    }),
)


def by_hand(raw: bytes) -> bool:
    try:
        msgs, _, _ = _parse_body(raw)
        for i, m in enumerate(msgs):
            _message(i, m)
    except MalformedError:
        return False
    return True


def by_model(raw: bytes) -> bool:
    try:
        ProduceRequest.model_validate_json(raw)
    except ValidationError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(bodies)
def test_hand_checks_and_model_agree(body: Any) -> None:
    raw = orjson.dumps(body)
    assert by_hand(raw) == by_model(raw), raw


def test_both_take_a_plain_valid_body_and_refuse_garbage() -> None:
    message = {"value": "YQ==", "key": "k", "properties": {"a": "b"}, "partition": 0}
    good = orjson.dumps({"messages": [message], "txn_id": "1:2",
                         "producer": {"name": "p", "epoch": 1, "sequence": 0}})
    assert by_hand(good) and by_model(good)
    for bad in (b"not json", b"[]", b'{"messages": [{"value": "!"}]}',
                b'{"messages": [], "txn_id": "1_0:2"}'):
        assert not by_hand(bad) and not by_model(bad)
