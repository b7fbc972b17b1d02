"""Transaction ids: layout, text form, validation; the one parser every service uses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from streamtx.contracts import TxnIdField
from streamtx.contracts.models import PartitionEnd
from streamtx.contracts.txnid import TxnId, from_pair
from streamtx.errors import MalformedError

#: Ids every service must answer 400 to (tests/integration/test_malformed_txn_ids.py sends them).
MALFORMED = ["", "1", "1:", ":1", "a:b", "1:2:3", "-1:2", "1:-2", " 1:2", "1:2 ", "²:1", "1:²",
             "1.0:2", "1_0:2", "+1:2", "1:+2", "0x1:2", "١:2", f"{2**64}:0", f"0:{2**64}",
             "9" * 5000 + ":1"]


def test_coordinator_id_is_top_16_bits_of_most() -> None:
    txn = TxnId.of(7, 42)
    assert txn.most == 7 << 48
    assert txn.least == 42
    assert txn.coordinator_id == 7
    assert txn.counter == 42
    assert str(txn) == f"{7 << 48}:42"


def test_counter_spills_into_most_below_the_coordinator_id() -> None:
    txn = TxnId.of(3, (5 << 64) | 9)
    assert (txn.most, txn.least) == ((3 << 48) | 5, 9)
    assert txn.coordinator_id == 3 and txn.counter == (5 << 64) | 9


@given(st.integers(0, 0xFFFF), st.integers(0, (1 << 112) - 1))
def test_round_trip(coordinator_id: int, counter: int) -> None:
    txn = TxnId.of(coordinator_id, counter)
    assert TxnId.parse(str(txn)) == txn
    assert (txn.coordinator_id, txn.counter) == (coordinator_id, counter)


def test_ids_of_one_coordinator_order_by_counter() -> None:
    ids = [TxnId.of(1, c) for c in (0, 1, 2**64 - 1, 2**64, 2**80)]
    assert ids == sorted(ids)


@pytest.mark.parametrize(
    "text",
    MALFORMED,
)
def test_malformed_ids_are_400(text: str) -> None:
    with pytest.raises(MalformedError):
        TxnId.parse(text)


@pytest.mark.parametrize(("cid", "counter"), [(-1, 0), (1 << 16, 0), (0, -1), (0, 1 << 112)])
def test_of_rejects_out_of_range(cid: int, counter: int) -> None:
    with pytest.raises(ValueError, match=r"coordinator id|counter"):
        TxnId.of(cid, counter)


@pytest.mark.parametrize("text", MALFORMED)
def test_a_model_field_rejects_what_the_parser_rejects(text: str) -> None:
    with pytest.raises(ValidationError):
        PartitionEnd.model_validate({"txn_id": text, "partition": "p", "action": "commit"})


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_a_model_field_round_trips(most: int, least: int) -> None:
    body = PartitionEnd(txn_id=TxnId(most, least), partition="persistent://t/n/x-partition-0",
                        action="commit")  # type: ignore[arg-type]
    wire = body.model_dump_json()
    assert f'"txn_id":"{most}:{least}"' in wire
    assert PartitionEnd.model_validate_json(wire).txn_id == TxnId(most, least)
    assert isinstance(PartitionEnd.model_validate_json(wire).txn_id, TxnId)


def test_from_pair_builds_real_ids() -> None:
    txn = from_pair((7, 9))
    assert type(txn) is TxnId and str(txn) == "7:9" and txn == (7, 9)


def test_the_json_schema_documents_the_text_form() -> None:
    schema = PartitionEnd.model_json_schema()["properties"]["txn_id"]
    assert schema["type"] == "string" and "pattern" in schema
    assert TxnIdField is not None
