"""Produce: ``POST /v1/topics/{tenant}/{namespace}/{topic}/messages``."""

from __future__ import annotations

import base64
import binascii

from fastapi import APIRouter
from pydantic import BaseModel, Field

from streamtx.broker import codec
from streamtx.broker.deps import BrokerDep, SettingsDep, topic_name
from streamtx.broker.topic import Outgoing
from streamtx.errors import MalformedError, TooLargeError

router = APIRouter(prefix="/v1/topics/{tenant}/{namespace}/{topic}", tags=["messages"])


class MessageCreate(BaseModel):
    """One message to produce; ``value`` is base64."""

    key: str | None = None
    value: str = ""
    properties: dict[str, str] = Field(default_factory=dict)
    partition: int | None = Field(None, ge=0)


class ProducerIdentity(BaseModel):
    """Who produces: dedup by ``sequence`` (per request), fencing by ``epoch``."""

    name: str = Field(min_length=1, max_length=1000)
    epoch: int = Field(0, ge=0, lt=1 << 64)
    sequence: int = Field(ge=0, lt=1 << 64)


class ProduceRequest(BaseModel):
    """A produce request: many messages, optionally in a transaction."""

    messages: list[MessageCreate]
    txn_id: str | None = None
    producer: ProducerIdentity | None = None


class ProducePublic(BaseModel):
    """The ids of the stored messages, in request order."""

    message_ids: list[str]


def _check_text(index: int, *texts: str | None) -> None:
    """Keys and properties are stored as UTF-8: a lone surrogate (valid JSON) is not."""
    for t in texts:
        if t is not None:
            try:
                t.encode()
            except UnicodeEncodeError as exc:
                raise MalformedError(f"messages.{index}: key or property is not valid unicode") from exc


def parse_txn(text: str | None) -> codec.TxnId | None:
    if text is None:
        return None
    try:
        return codec.parse_txn(text)
    except ValueError as exc:
        raise MalformedError(f"bad txn_id {text!r}") from exc


@router.post("/messages")
async def produce(tenant: str, namespace: str, topic: str, body: ProduceRequest,
                  broker: BrokerDep, settings: SettingsDep) -> ProducePublic:
    if len(body.messages) > settings.max_request_messages:
        raise TooLargeError(f"at most {settings.max_request_messages} messages per request")
    txn = parse_txn(body.txn_id)
    out = []
    for i, m in enumerate(body.messages):
        try:
            value = base64.b64decode(m.value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise MalformedError(f"messages.{i}.value is not base64") from exc
        _check_text(i, m.key, *m.properties.keys(), *m.properties.values())
        out.append(Outgoing(codec.Message(value, m.key, m.properties, i), m.partition))
    producer = None
    if body.producer is not None:
        p = body.producer
        producer = codec.ProducerInfo(p.name, p.epoch, p.sequence)
    ids = await broker.topic(topic_name(tenant, namespace, topic)).produce(out, txn, producer)
    return ProducePublic(message_ids=ids)
