"""Subscriptions: create, fetch (long-poll), acks, nacks, stats."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel, Field

from streamtx.broker.deps import (
    BrokerDep,
    broker_of,
    check_client_name,
    not_reserved_subscription,
    topic_name,
)
from streamtx.broker.dispatch import Handed, render_batch, render_json, unit_message_id
from streamtx.broker.registry import Broker, split_partition
from streamtx.broker.replicas import spread
from streamtx.broker.replicas.fanout import merge_subscription
from streamtx.broker.replicas.plan import SpreadPlan
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.subscription import Subscription, SubscriptionType
from streamtx.broker.topic import Topic
from streamtx.contracts.body import Lax, StrictBody
from streamtx.contracts.msgid import MessageId, MessageIdText, parse_many
from streamtx.contracts.txnid import TxnId, TxnIdField
from streamtx.errors import ConflictError, MalformedError, NotOwnerError
from streamtx.names import topic_of
from streamtx.service import HotRequest, HotRoutes
from streamtx.service.longpoll import LongPoll
from streamtx.service.openapi import responses
from streamtx.wire import batch as wire

# Reserved subscription names (pulsar.repl.<cluster>: the replicator's cursor) are refused
# to clients on every route here; the hot routes, which skip FastAPI's dependencies, check too.
router = APIRouter(prefix="/v1/topics/{tenant}/{namespace}/{topic}/subscriptions/{sub}",
                   tags=["subscriptions"], dependencies=[Depends(not_reserved_subscription)])
hot = HotRoutes(router)


class SubscriptionCreate(StrictBody):
    """Where a new subscription starts and its type (query ``type`` wins over the body)."""

    initial_position: str = Field(default="latest", pattern="^(earliest|latest)$")
    type: Annotated[SubscriptionType, Lax] | None = None
    replicated: bool | None = None  # PIP-33 replicated subscription (unchanged when absent)


class SubscriptionPublic(BaseModel):
    """A subscription as created."""

    topic: str
    subscription: str
    type: SubscriptionType
    initial_position: str
    replicated: bool = False
    # Only to another replica creating it on a spread topic: where it is open on this one.
    partitions: list[int] | None = None


class AckRequest(StrictBody):
    """Acknowledge messages, individually or cumulatively, optionally in a transaction."""

    message_ids: list[MessageIdText] = Field(min_length=1)
    txn_id: TxnIdField | None = None
    cumulative: bool = False


class NackRequest(StrictBody):
    """Negative acks: redeliver these messages."""

    message_ids: list[MessageIdText] = Field(min_length=1)


class MessagesPublic(BaseModel):
    """Messages handed to a consumer."""

    messages: list[dict[str, Any]]


@router.put("", response_model_exclude_none=True)
async def create_subscription(request: Request, tenant: str, namespace: str, topic: str, sub: str,
                              broker: BrokerDep, body: SubscriptionCreate | None = None,
                              type: SubscriptionType | None = None) -> SubscriptionPublic:
    body = body or SubscriptionCreate()
    sub_type = type or body.type or SubscriptionType.SHARED
    name = topic_name(tenant, namespace, topic)
    if _here(request):  # the replica creating it asks: open it here now (it is recorded)
        return SubscriptionPublic(topic=name, subscription=sub, type=sub_type,
                                  initial_position=body.initial_position,
                                  partitions=await broker.open_recorded(name, sub))
    created = await broker.create_subscription(name, sub, sub_type, body.initial_position, body.replicated)
    if broker.replicas and body.initial_position == "latest":
        await _open_everywhere(request, broker, name, sub, created)
    if created is None:  # replicas: none of its partitions is here; recorded for their owners
        return SubscriptionPublic(topic=name, subscription=sub, type=sub_type,
                                  initial_position=body.initial_position, replicated=bool(body.replicated))
    return SubscriptionPublic(topic=name, subscription=sub, type=created.type,
                              initial_position=body.initial_position, replicated=created.replicated)


@router.delete("", openapi_extra=responses(409))  # consumers connected (no force); txn acks pending
async def delete_subscription(request: Request, tenant: str, namespace: str, topic: str, sub: str,
                              broker: BrokerDep, force: bool = False) -> dict[str, Any]:
    """Unsubscribe (Pulsar's ``DELETE .../subscription/{sub}``): its cursors go on every partition
    (other broker replicas' at their next catalog tick) and no restart or takeover reopens it."""
    name = topic_name(tenant, namespace, topic)
    if broker.replicas:
        await _deletable_everywhere(request, broker, (tenant, namespace, topic, sub), force)
    if broker.pendingack.configured:
        # Its pending-ack state first (issue 32 defect 10: a subscription created again with the
        # name inherited the commits); the store refuses (409) while a transaction holds acks there.
        base = topic_of(name)
        known = broker.catalog.topics.get(base)
        await broker.pendingack.delete(base, sub, known.partitions if known is not None else 0)
    await broker.delete_subscription(name, sub, force=force)
    return {"topic": name, "subscription": sub, "deleted": True}


async def _deletable_everywhere(request: Request, broker: Broker, names: tuple[str, str, str, str],
                                force: bool) -> None:
    """The 409s of a delete, for the partitions other broker replicas own as well: an open
    transaction's acks held there would be lost with the cursor, and a consumer there is connected.
    (Asked before the delete is recorded: an ack landing on another owner in between is the window
    docs/api.md names.)"""
    async def here(s: Subscription) -> dict[str, Any]:
        return await s.stats()

    for answer in await _on_every_owner(request, broker, names, "stats", here, method="GET"):
        if answer.get("heldByTransactions"):
            raise ConflictError(f"subscription {names[3]} has acks pending in open transactions on another "
                                "broker's partitions: end them first")
        if answer.get("consumers") and not force:
            raise ConflictError(f"subscription {names[3]} has connected consumers on another broker's "
                                "partitions: close them or delete with force=true")


async def _open_everywhere(request: Request, broker: Broker, name: str, sub: str,
                           created: Subscription | None) -> None:
    """A ``latest`` subscription starts on every partition when its creation is answered (as
    Pulsar's client subscribes to every partition first): each other owner opens it now, at
    its partitions' end (an owner that had it open moves nothing). 503 (retry: creating it is
    idempotent) when a partition moved meanwhile, so that its new owner may have missed it."""
    base = created.topic if created is not None else split_partition(name)[0]
    if base not in broker.catalog.topics:
        base = name
    here = [p.index for p in created.parts] if created is not None else []
    owners = broker.owners_elsewhere(base, here)
    path = "/v1/topics/" + base.removeprefix("persistent://") + f"/subscriptions/{sub}"
    body = orjson.dumps({"initial_position": "latest"})

    async def open_at(owner: str) -> list[int]:
        r = await request.app.state.forwarder.send(owner, "PUT", path, content=body,
                                                   headers={"content-type": "application/json"})
        return [int(i) for i in orjson.loads(r.content).get("partitions") or []]

    opened = set(here).union(*await asyncio.gather(*(open_at(o) for o in owners)))
    if missing := sorted(set(range(broker.catalog.topics[base].partitions)) - opened):
        raise NotOwnerError(f"partitions {missing} of {base} moved while subscription {sub} was "
                            "created: retry", None)


#: The longest consumer name (Pulsar's are free text; a name is kept per subscription, and over
#: broker replicas in Redis, so an unbounded one was memory anyone could take).
MAX_CONSUMER_NAME_CHARS = 400
ConsumerName = Annotated[str, Path(min_length=1, max_length=MAX_CONSUMER_NAME_CHARS)]


class FetchQuery(BaseModel):
    """Query of a fetch: how many, how long to wait, who asks, which partitions."""

    max: int = Field(100, ge=1)
    wait_ms: int = Field(500, ge=0)
    consumer: str = Field("default", min_length=1, max_length=MAX_CONSUMER_NAME_CHARS)
    partitions: str | None = Field(None, pattern=r"^\d+(,\d+)*$")


@hot.get("/messages", query=FetchQuery, long_poll=True, response_model=MessagesPublic,
         openapi_extra=responses(409, 429))  # an Exclusive subscription's other consumer; too many consumers
async def fetch(request: HotRequest) -> bytes:
    """Messages for this consumer, waiting up to ``wait_ms`` for the first (long poll).

    The wait ends early (an empty answer) when the client disconnects or the broker stops.
    With ``Accept: application/x-streamtx-batch`` the answer is the binary batch
    format: the stored entries as they are (docs/api.md, :mod:`streamtx.wire.batch`)."""
    broker = broker_of(request.state)
    settings: BrokerSettings = request.state.settings
    q = request.query(FetchQuery)
    p = request.params
    check_client_name("subscription", p["sub"], request.principal)
    name = topic_name(p["tenant"], p["namespace"], p["topic"])
    only = None if q.partitions is None else [int(p) for p in q.partitions.split(",")]
    binary = wire.is_batch(request.header("accept"))
    if binary:
        request.response_type = wire.CONTENT_TYPE
    max_messages, wait_ms = min(q.max, settings.max_fetch_messages), min(q.wait_ms, settings.max_wait_ms)
    at = broker.resolve(name, here=_here(request))
    if isinstance(at, SpreadPlan):
        plan = at
        sub = await broker.subscription(plan.topic, p["sub"]) if plan.topic is not None else None

        async def local(idx: list[int], n: int, wait: int) -> bytes:
            assert sub is not None
            return _render(await _answered(sub, q.consumer, n, wait, idx, request.poll), binary)

        return await spread.fetch(request.state.forwarder, plan, _path(p, "messages"),
                                  {"consumer": q.consumer}, only, max_messages, wait_ms, binary, local,
                                  request.poll)
    s = await broker.subscription(at.topic, p["sub"])
    if (index := at.index) is not None:  # the partition's own name: that partition only
        if only is not None and only != [index]:
            raise MalformedError(f"partitions={q.partitions} asked of partition {index}")
        only = [index]
    return _render(await _answered(s, q.consumer, max_messages, wait_ms, only, request.poll), binary)


async def _answered(s: Subscription, consumer: str, max_messages: int, wait_ms: int, only: list[int] | None,
                    poll: LongPoll | None) -> list[Handed]:
    """A fetch's messages; none when its client went away meanwhile: those are given back, as the
    answer would reach nobody (a replica forwarding a spread fetch whose client left cancels its
    forwarded polls: the owner sees that as its client leaving)."""
    got = await s.fetch_raw(consumer, max_messages, wait_ms, only, poll)
    if got and poll is not None and poll.gone:
        s.give_back(consumer, got)
        return []
    return got


def _render(got: list[Handed], binary: bool) -> bytes:
    if binary:
        return render_batch(got)
    # Bytes straight from orjson: pydantic serializing list[dict[str, Any]] cost more.
    return orjson.dumps({"messages": render_json(got)})


def _here(request: HotRequest | Request) -> bool:
    """A replica forwarded this request on a spread topic's name: the partitions here only."""
    if isinstance(request, Request):
        return request.headers.get(spread.HERE) is not None
    return request.header(spread.HERE) is not None


def _path(p: dict[str, str], tail: str) -> str:
    return f"/v1/topics/{p['tenant']}/{p['namespace']}/{p['topic']}/subscriptions/{p['sub']}/{tail}"


async def _spread(broker: Broker, request: HotRequest | Request, name: str
                  ) -> tuple[Topic | None, SpreadPlan | None]:
    """The topic a request names, or (None, plan) when its partitions are spread over replicas."""
    at = broker.resolve(name, here=_here(request))
    return (None, at) if isinstance(at, SpreadPlan) else (at.topic, None)


def _ack_body(request: HotRequest) -> tuple[list[MessageId], TxnId | None, bool]:
    """The ids typed (the binary body's as decoded, the JSON's by the one strict parser)."""
    if wire.is_batch(request.header("content-type")):
        got = wire.decode_acks(request.body)
        if not got.ids:
            raise MalformedError("message_ids: at least one id")
        return got.ids, got.txn, got.cumulative
    body = request.json(AckRequest)
    return parse_many(body.message_ids), body.txn_id, body.cumulative


@hot.post("/acks", body=AckRequest)
async def ack(request: HotRequest) -> bytes:
    """Acknowledge messages; in a transaction they are held until it ends.

    With ``Content-Type: application/x-streamtx-batch`` the ids come as the binary
    batch format's *acks* body (docs/api.md); the answer is JSON either way."""
    broker = broker_of(request.state)
    message_ids, txn, cumulative = _ack_body(request)
    p = request.params
    check_client_name("subscription", p["sub"], request.principal)
    name = topic_name(p["tenant"], p["namespace"], p["topic"])
    topic, plan = await _spread(broker, request, name)
    if txn is not None and broker.txn_guard is not None:
        # The door check (issue 21 item 2): the transaction open, the subscription registered in
        # it under the name acked on (the name its end comes by), the caller its owner.
        await broker.txn_guard.check(txn, request.principal, subscriptions=[(name, p["sub"])])

    async def local(ids: list[MessageId]) -> None:
        t = topic or (plan.topic if plan is not None else None)
        assert t is not None
        # The store records them under the name the caller registered (a spread topic's too).
        await _ack(broker, await broker.subscription(t, p["sub"]), name, p["sub"], ids, txn, cumulative)

    if plan is None:
        await local(message_ids)
    else:
        await spread.acks(request.state.forwarder, plan, _path(p, "acks"), message_ids, txn, cumulative,
                          wire.is_batch(request.header("content-type")), local)
    return b'{"acked":%d}' % len(message_ids)


async def _ack(broker: Broker, s: Subscription, name: str, sub: str, message_ids: list[MessageId],
               txn: TxnId | None, cumulative: bool) -> None:
    if txn is None:
        await s.ack(message_ids, cumulative)
        return
    await s.until_ready()
    resolved = await s.check_txn_ack(message_ids, txn, cumulative)
    # Held before the call, so no redelivery hands them out meanwhile.
    newly = s.hold(resolved, txn, cumulative)
    try:
        # The store is told the canonical ids held (a whole batch entry's id as its messages'),
        # so its conflict checks compare one spelling of each message.
        await broker.pendingack.ack(name, sub, txn, [unit_message_id(u) for _, u in resolved], cumulative)
    except BaseException:
        s.unhold(newly, txn)
        raise


@router.post("/nacks")
async def nack(request: Request, tenant: str, namespace: str, topic: str, sub: str, body: NackRequest,
               broker: BrokerDep) -> dict[str, int]:
    t, plan = await _spread(broker, request, topic_name(tenant, namespace, topic))
    if plan is None:
        assert t is not None
        await (await broker.subscription(t, sub)).nack(parse_many(body.message_ids))
        return {"nacked": len(body.message_ids)}
    path = _path({"tenant": tenant, "namespace": namespace, "topic": topic, "sub": sub}, "nacks")
    for owner, ids in spread.by_owner(plan, parse_many(body.message_ids)).items():
        if owner:
            await request.app.state.forwarder.send(
                owner, "POST", path, content=orjson.dumps({"message_ids": [str(m) for m in ids]}),
                headers={"content-type": "application/json"})
        else:
            assert plan.topic is not None
            await (await broker.subscription(plan.topic, sub)).nack(ids)
    return {"nacked": len(body.message_ids)}


async def _on_every_owner(request: Request, broker: Broker, names: tuple[str, str, str, str], tail: str,
                          here: Callable[[Subscription], Awaitable[Any]], method: str | None = None
                          ) -> list[Any]:
    """``here(subscription)`` on this replica's partitions, and the same request (or ``method`` on
    ``tail``) on every other owner when the topic is spread: every answer."""
    tenant, namespace, topic, sub = names
    t, plan = await _spread(broker, request, topic_name(tenant, namespace, topic))
    if plan is None:
        assert t is not None
        return [await here(await broker.subscription(t, sub))]
    path = _path({"tenant": tenant, "namespace": namespace, "topic": topic, "sub": sub}, tail)

    async def local() -> Any:
        assert plan.topic is not None
        return await here(await broker.subscription(plan.topic, sub))

    return await spread.everywhere(request.app.state.forwarder, plan, method or request.method, path, None,
                                   local)


@router.get("/consumers/{consumer}")
async def consumer_partitions(request: Request, tenant: str, namespace: str, topic: str, sub: str,
                              consumer: ConsumerName, broker: BrokerDep) -> dict[str, Any]:
    """The partitions this consumer is active on now (Failover; all of them otherwise)."""
    async def here(s: Subscription) -> dict[str, Any]:
        return {"partitions": s.partitions_of(consumer)}

    answers = await _on_every_owner(request, broker, (tenant, namespace, topic, sub), f"consumers/{consumer}",
                                    here)
    return {"consumer": consumer, "partitions": sorted({int(i) for a in answers for i in a["partitions"]})}


@router.delete("/consumers/{consumer}")
async def close_consumer(request: Request, tenant: str, namespace: str, topic: str, sub: str,
                         consumer: ConsumerName, broker: BrokerDep) -> dict[str, Any]:
    """The consumer leaves: on a Failover subscription its partitions move at once."""
    async def here(s: Subscription) -> dict[str, Any]:
        return {"closed": await s.close_consumer_everywhere(consumer)}

    answers = await _on_every_owner(request, broker, (tenant, namespace, topic, sub), f"consumers/{consumer}",
                                    here)
    return {"consumer": consumer, "closed": any(a["closed"] for a in answers)}


@router.get("/stats")
async def subscription_stats(request: Request, tenant: str, namespace: str, topic: str, sub: str,
                             broker: BrokerDep) -> dict[str, Any]:
    async def here(s: Subscription) -> dict[str, Any]:
        return await s.stats()

    answers = await _on_every_owner(request, broker, (tenant, namespace, topic, sub), "stats", here)
    return dict(answers[0]) if len(answers) == 1 else merge_subscription(answers)
