"""Produce: ``POST /v1/topics/{tenant}/{namespace}/{topic}/messages``.

``{topic}`` is the topic (messages routed over its partitions) or one partition's
own name ``x-partition-N`` (every message stored there; a message's ``partition``,
if given, must be N): broker replicas own partitions, and the SDK sends each
partition's messages to that partition's name, so each request reaches one owner.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from fastapi import APIRouter
from pydantic import BaseModel, Field, ValidationError

from streamtx.broker.deps import broker_of, check_client_name, topic_name
from streamtx.broker.partition import RawBatch
from streamtx.broker.registry import Broker, partition_item
from streamtx.broker.replicas import spread
from streamtx.broker.replicas.plan import SpreadPlan
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.topic import Outgoing, TxnCheck
from streamtx.contracts.body import Base64Text, StrictBody, decode_value
from streamtx.contracts.txnid import TxnId, TxnIdField
from streamtx.errors import MalformedError, TooLargeError
from streamtx.records import partition as codec
from streamtx.service import HotRequest, HotRoutes
from streamtx.service.fastlane import first_error
from streamtx.wire import batch as wire

router = APIRouter(prefix="/v1/topics/{tenant}/{namespace}/{topic}", tags=["messages"])
hot = HotRoutes(router)


# The produce route checks bodies by hand (below) for speed; these models are what
# OpenAPI documents and what tests/unit/broker/test_produce_validation.py holds the
# hand-written checks to: strict types, so the two accept exactly the same bodies.
class MessageCreate(StrictBody):
    """One message to produce; ``value`` is base64."""

    key: str | None = None
    value: Base64Text = ""
    properties: dict[str, str] | None = None
    partition: int | None = Field(None, ge=0)


class ProducerIdentity(StrictBody):
    """Who produces: dedup by ``sequence`` (per request), fencing by ``epoch``."""

    name: str = Field(min_length=1, max_length=1000)
    epoch: int = Field(0, ge=0, lt=1 << 64)
    sequence: int = Field(ge=0, lt=1 << 64)


class ProduceRequest(StrictBody):
    """A produce request: many messages, optionally in a transaction."""

    messages: list[MessageCreate]
    txn_id: TxnIdField | None = None
    producer: ProducerIdentity | None = None


class ProducePublic(BaseModel):
    """The ids of the stored messages, in request order."""

    message_ids: list[str]


def parse_txn(text: str | None) -> TxnId | None:
    """The body's optional ``txn_id`` (the one strict parser: 400 when malformed)."""
    return None if text is None else TxnId.parse(text)



def _parse_body(raw: bytes) -> tuple[list[Any], TxnId | None, codec.ProducerInfo | None]:
    """The produce body, checked by hand: a pydantic model per message is the hot path's cost.

    orjson rejects lone surrogates, so keys and properties are valid UTF-8 once parsed.
    """
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MalformedError(f"body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise MalformedError("body: must be an object")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise MalformedError("messages: must be a list" if "messages" in body else "messages: field required")
    txn_id = body.get("txn_id")
    if txn_id is not None and not isinstance(txn_id, str):
        raise MalformedError("txn_id: must be a string")
    txn = parse_txn(txn_id)
    producer = None
    if (p := body.get("producer")) is not None:
        try:
            ident = ProducerIdentity.model_validate(p)
        except ValidationError as exc:
            raise MalformedError(f"producer.{first_error(exc)}") from None
        producer = codec.ProducerInfo(ident.name, ident.epoch, ident.sequence)
    return messages, txn, producer


def _message(i: int, m: Any) -> Outgoing:
    if type(m) is not dict:
        raise MalformedError(f"messages.{i}: must be an object")
    value = m.get("value", "")
    key = m.get("key")
    props = m.get("properties")
    partition = m.get("partition")
    if type(value) is not str:
        raise MalformedError(f"messages.{i}.value: must be a base64 string")
    if key is not None and type(key) is not str:
        raise MalformedError(f"messages.{i}.key: must be a string or null")
    if props is None:
        props = {}
    elif type(props) is not dict or not all(type(v) is str for v in props.values()):
        raise MalformedError(f"messages.{i}.properties: must be an object of strings")
    if type(partition) is float and partition.is_integer():  # 3.0 is JSON Schema's integer 3 (StrictBody)
        partition = int(partition)
    if partition is not None and (type(partition) is not int or partition < 0):
        raise MalformedError(f"messages.{i}.partition: must be an integer >= 0")
    try:
        data = decode_value(value)
    except ValueError as exc:
        raise MalformedError(f"messages.{i}.value is not base64") from exc
    return Outgoing(codec.Message(data, key, props, i), partition)


def _path(p: dict[str, str]) -> str:
    return f"/v1/topics/{p['tenant']}/{p['namespace']}/{p['topic']}/messages"


_min_message_bytes = 14  # request index, key length, property count, value length


def txn_check(request: HotRequest, broker: Broker, txn: TxnId | None, topic: str) -> TxnCheck | None:
    """The door check of a produce in ``txn`` on partitions of ``topic`` (issue 21 item 2): the
    transaction open, each partition registered in it, the caller its owner. None: nothing to
    check (no transaction, or no coordinator to ask)."""
    guard = broker.txn_guard
    if txn is None or guard is None:
        return None
    principal = request.principal

    async def check(indexes: Iterable[int]) -> None:
        await guard.check(txn, principal, partitions=[partition_item(topic, i) for i in indexes])

    return check


async def _produce_batch(request: HotRequest) -> bytes:
    """The binary path (:mod:`streamtx.wire.batch`): each section validated, stored as is."""
    settings: BrokerSettings = request.state.settings
    got = wire.decode_produce(request.body)
    total = sum(s.count for s in got.sections)
    if total > settings.max_request_messages:
        raise TooLargeError(f"at most {settings.max_request_messages} messages per request")
    sections: list[tuple[int, RawBatch]] = []
    for s in got.sections:
        if s.count * _min_message_bytes > len(s.body):
            raise MalformedError(f"section of partition {s.partition}: {s.count} messages cannot fit "
                                 f"in {len(s.body)} bytes")
        values = wire.validate_messages(s.body, s.count, s.first_index)
        sections.append((s.partition, RawBatch(s.body, s.count, s.first_index, values)))
    producer = None
    if got.producer is not None:
        name, epoch, sequence = got.producer
        if len(name) > 1000:
            raise MalformedError("producer.name: at most 1000 characters")
        check_client_name("producer", name, request.principal)
        producer = codec.ProducerInfo(name, epoch, sequence)
    p = request.params
    broker = broker_of(request.state)
    name = topic_name(p["tenant"], p["namespace"], p["topic"])
    at = broker.resolve(name, here=request.header(spread.HERE) is not None)
    base, only = (at.name, None) if isinstance(at, SpreadPlan) else (at.topic.name, at.index)
    if check := txn_check(request, broker, got.txn, base):
        # Every partition the sections name, or the one an empty request records its producer on.
        await check([s.partition for s in got.sections] or [0 if only is None else only])
    if isinstance(at, SpreadPlan):
        plan = at

        async def local(mine: list[wire.Section]) -> list[tuple[int, int, int]]:
            assert plan.topic is not None
            return await plan.topic.produce_sections([(s.partition, by_index[s.partition]) for s in mine],
                                                     got.txn, producer)

        by_index = {i: b for i, b in sections}
        rows = await spread.produce_sections(request.state.forwarder, plan, _path(p), list(got.sections),
                                             local, got.txn, producer)
    else:
        rows = await at.topic.produce_sections(sections, got.txn, producer, at.index)
    request.response_type = wire.CONTENT_TYPE
    return wire.encode_produced(rows)


@hot.post("/messages", body=ProduceRequest, response_model=ProducePublic)
async def produce(request: HotRequest) -> bytes:
    """Store messages (one entry per partition), optionally in a transaction; their ids in order.

    With ``Content-Type: application/x-streamtx-batch`` the body and the answer are
    the binary batch format (docs/api.md, :mod:`streamtx.wire.batch`)."""
    if wire.is_batch(request.header("content-type")):
        return await _produce_batch(request)
    # The body is checked by hand after one orjson parse: per-message pydantic
    # models and text checks were a fifth of the broker's CPU.
    broker = broker_of(request.state)
    settings: BrokerSettings = request.state.settings
    messages, txn, producer = _parse_body(request.body)
    if producer is not None:
        check_client_name("producer", producer.name, request.principal)
    if len(messages) > settings.max_request_messages:
        raise TooLargeError(f"at most {settings.max_request_messages} messages per request")
    out = [_message(i, m) for i, m in enumerate(messages)]
    p = request.params
    name = topic_name(p["tenant"], p["namespace"], p["topic"])
    at = broker.resolve(name, here=request.header(spread.HERE) is not None)
    if isinstance(at, SpreadPlan):
        ids = await spread.produce_json(request.state.forwarder, at, _path(p), messages, out, txn, producer,
                                        check=txn_check(request, broker, txn, at.name))
    else:
        ids = await at.topic.produce(out, txn, producer, at.index,
                                     check=txn_check(request, broker, txn, at.topic.name))
    return orjson.dumps({"message_ids": ids})
