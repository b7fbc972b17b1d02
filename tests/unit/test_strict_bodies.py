"""Request bodies parse strictly (issue 21 item 11): no JSON type stands in for another.

``{"timeout_ms": true}`` opened a transaction with a 1 ms timeout; ``"60000"``,
``{"enabled": 0}``, ``sequence: false`` and ``partition: false`` were accepted.
Each body is checked the two ways the services parse: from JSON bytes (the fast
lane, ``model_validate_json``) and from decoded JSON (FastAPI routes, ``validate_python``).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import BaseModel, ValidationError

from streamtx.broker.routes.messages import ProduceRequest, ProducerIdentity, _parse_body
from streamtx.broker.routes.subscriptions import AckRequest, SubscriptionCreate
from streamtx.broker.routes.topics import PartitionsBody, TrimBody
from streamtx.contracts.models import PartitionEnd, PendingAckCreate, SubscriptionAcksEnd
from streamtx.contracts.replication import (
    AckExport,
    ReplicatedEntry,
    ReplicatedTopic,
    ReplicationRead,
    ReplicationScan,
    ReplicatorAck,
    ReplicatorCursor,
)
from streamtx.coordinator.routes.admin import BatchLogSwitch
from streamtx.coordinator.routes.transactions import TxnCreate
from streamtx.errors import MalformedError
from streamtx.pendingack.models import BatchLogUpdate

T = "persistent://t/n/x-partition-0"
#: (model, a valid body, the field to spoil, values of another JSON type for it)
CASES: list[tuple[type[BaseModel], dict[str, Any], str, list[Any]]] = [
    (TxnCreate, {"timeout_ms": 60000}, "timeout_ms", [True, "60000", 60000.5]),
    (BatchLogSwitch, {"enabled": True}, "enabled", [0, 1, "true"]),
    (BatchLogUpdate, {"enabled": False}, "enabled", [0, "false"]),
    (ProducerIdentity, {"name": "p", "epoch": 0, "sequence": 3}, "sequence", [False, "3", 3.5]),
    (ProducerIdentity, {"name": "p", "epoch": 0, "sequence": 3}, "epoch", [True]),
    (ProduceRequest, {"messages": [{"value": "", "partition": 0}]}, "messages",
     [[{"value": "", "partition": False}]]),
    (TrimBody, {"partition": 0}, "partition", [False, "0"]),
    (PartitionsBody, {"partitions": 2}, "partitions", [True, "2"]),
    (AckRequest, {"message_ids": ["1:2"], "cumulative": False}, "cumulative", [0, "false"]),
    (SubscriptionCreate, {"initial_position": "earliest", "type": "Shared", "replicated": True},
     "replicated", [1, "true"]),
    (ReplicationRead, {"topic": "persistent://t/n/x", "partition": 0, "remote": "b"}, "partition",
     [False, "0"]),
    (ReplicationRead, {"topic": "persistent://t/n/x", "partition": 0, "remote": "b"}, "connected", [0]),
    (ReplicatorCursor, {"topic": "persistent://t/n/x", "partition": 0, "remote": "b"}, "partition", [True]),
    (ReplicatorAck, {"topic": "persistent://t/n/x", "partition": 0, "remote": "b", "position": "1:2"},
     "messages", [True, "1"]),
    (ReplicatedTopic, {"topic": "persistent://t/n/x", "partitions": 1}, "partitions", [True]),
    (ReplicatedEntry, {"position": "1:2", "publish_time": 5}, "publish_time", [True, "5"]),
    (ReplicationScan, {"topic": "persistent://t/n/x", "partition": 0}, "wait_ms", [False, "10"]),
    (AckExport, {"topic": "persistent://t/n/x", "partition": 0, "subscription": "s"}, "back", [True]),
    (PartitionEnd, {"txn_id": "1:2", "partition": T, "action": "commit"}, "partition", [5]),
    (PendingAckCreate, {"topic": T, "subscription": "s", "txn_id": "1:2", "message_ids": ["1:2"]},
     "cumulative", [0, "true"]),
    (SubscriptionAcksEnd, {"topic": T, "subscription": "s", "txn_id": "1:2", "action": "abort"},
     "message_ids", [["1:2", 5]]),
]


@pytest.mark.parametrize(("model", "good", "field", "bad"), CASES,
                         ids=[f"{m.__name__}.{f}" for m, _, f, _ in CASES])
def test_a_value_of_another_json_type_is_refused_both_ways(model: type[BaseModel], good: dict[str, Any],
                                                            field: str, bad: list[Any]) -> None:
    model.model_validate_json(orjson.dumps(good))
    model.model_validate(good)  # as FastAPI validates a decoded body
    for value in bad:
        body = {**good, field: value}
        with pytest.raises(ValidationError):
            model.model_validate_json(orjson.dumps(body))
        with pytest.raises(ValidationError):
            model.model_validate(body)


def test_the_produce_routes_hand_parser_refuses_a_producer_of_the_wrong_types() -> None:
    ok = {"messages": [], "producer": {"name": "p", "epoch": 0, "sequence": 1}}
    assert _parse_body(orjson.dumps(ok))[2] is not None
    for producer in ({"name": "p", "sequence": False}, {"name": "p", "sequence": "1"},
                     {"name": "p", "epoch": True, "sequence": 1}):
        with pytest.raises(MalformedError):
            _parse_body(orjson.dumps({"messages": [], "producer": producer}))


def test_enumerations_still_take_their_json_strings() -> None:
    assert SubscriptionCreate.model_validate({"type": "Exclusive"}).type is not None
    assert PartitionEnd.model_validate({"txn_id": "1:2", "partition": T, "action": "abort"}).action == "abort"
    with pytest.raises(ValidationError):
        PartitionEnd.model_validate({"txn_id": "1:2", "partition": T, "action": "ABORTED"})


def test_a_number_with_no_fraction_is_an_integer_as_json_schema_says() -> None:
    # The OpenAPI documents say "integer"; JSON Schema counts 5.0 as one (schemathesis sends it).
    assert TxnCreate.model_validate_json(b'{"timeout_ms": 5.0}').timeout_ms == 5
    assert TrimBody.model_validate({"partition": 1.0}).partition == 1
    body = {"messages": [], "producer": {"name": "p", "sequence": 2.0}}
    assert _parse_body(orjson.dumps(body))[2] is not None
