"""A fetch whose client went away hands nothing out into the void (issue 21 item 6).

A spread fetch forwards polls to the other owners of the topic's partitions. Before:
when the client left, only the local share of the long poll ended; the forwarded ones
ran on and handed out messages whose answer went nowhere, which on Exclusive and
Failover subscriptions stayed out with that consumer for good. Now the forwarded polls
are cancelled with their client, what an owner's answer carried when the client had
left is nacked on that owner, and an owner (any broker) gives back what a fetch took
when its own client left.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from streamtx.broker.notify import Notifier
from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.registry import Broker
from streamtx.broker.replicas import spread
from streamtx.broker.replicas.plan import SpreadPlan
from streamtx.broker.routes.subscriptions import _answered
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.subscription import SubscriptionType
from streamtx.broker.topic import Outgoing, Topic
from streamtx.ledger import open_ledger_factory
from streamtx.records.partition import Message
from streamtx.service.longpoll import LongPoll
from streamtx.wire.fetch import Delivered, decode_messages_answer, encode_messages_answer
from streamtx.wire.messages import Msg, encode_messages

T = "persistent://t/n/gone"
OWNER = "http://b1"
PATH = "/v1/topics/t/n/gone/subscriptions/s/messages"
IDS = ["7:0:0", "7:0:1"]  # two messages of entry 7:0


class FakeOwner(spread.Forwarder):
    """The other owner of partition 1: answers ``answer(wait_ms)`` to a fetch, records the rest."""

    def __init__(self, answer: Any) -> None:
        super().__init__(None, 1.0)
        self.answer = answer
        self.calls: list[tuple[str, str, Any]] = []
        self.cancelled = asyncio.Event()

    async def send(self, owner: str, method: str, path: str, *, params: dict[str, Any] | None = None,
                   content: bytes | None = None, headers: dict[str, str] | None = None,
                   wait_s: float = 0.0) -> httpx.Response:
        self.calls.append((method, path, params if method == "GET" else orjson.loads(content or b"null")))
        if method != "GET":
            return httpx.Response(200, content=b"{}")
        try:
            return httpx.Response(200, content=await self.answer(int((params or {})["wait_ms"])))
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


def _plan() -> SpreadPlan:
    router = Topic(T, [], Notifier(), count=2, indexes=[])
    return SpreadPlan(T, 2, None, [], {OWNER: [1]}, router, {})


async def _nothing_here(idx: list[int], n: int, wait: int) -> bytes:
    raise AssertionError("no partition is open here")


def _json(ids: list[str]) -> bytes:
    return orjson.dumps({"messages": [{"message_id": i, "value": ""} for i in ids]})


def _binary(ids: list[str]) -> bytes:
    count, body = encode_messages([Msg(b"v") for _ in ids])
    return encode_messages_answer([Delivered(1, 7, 0, 0, count, body)])


async def test_the_forwarded_polls_end_with_their_client() -> None:
    polling = asyncio.Event()

    async def answer(wait_ms: int) -> bytes:
        if wait_ms == 0:
            return _json([])
        polling.set()
        await asyncio.Event().wait()  # a long poll that nothing would end before its 30 s
        raise AssertionError("unreachable")

    fwd, poll = FakeOwner(answer), LongPoll()
    fetching = asyncio.create_task(spread.fetch(fwd, _plan(), PATH, {"consumer": "c"}, None, 10, 30_000,
                                                False, _nothing_here, poll))
    await polling.wait()
    poll.gone = True
    poll.end()  # the client disconnected
    assert orjson.loads(await asyncio.wait_for(fetching, 5)) == {"messages": []}
    assert fwd.cancelled.is_set()


@pytest.mark.parametrize("binary", [False, True])
async def test_what_an_answer_carried_when_its_client_had_left_is_nacked_on_its_owner(binary: bool) -> None:
    poll = LongPoll()

    async def answer(wait_ms: int) -> bytes:
        if wait_ms == 0:
            return _json([]) if not binary else encode_messages_answer([])
        poll.gone = True
        poll.end()  # the client leaves as the owner's answer comes back with messages
        return _binary(IDS) if binary else _json(IDS)

    fwd = FakeOwner(answer)
    got = await asyncio.wait_for(spread.fetch(fwd, _plan(), PATH, {"consumer": "c"}, None, 10, 30_000,
                                              binary, _nothing_here, poll), 5)
    assert ("POST", PATH.replace("/messages", "/nacks"), {"message_ids": IDS}) in fwd.calls
    if binary:
        assert decode_messages_answer(got) == []
    else:
        assert orjson.loads(got) == {"messages": []}


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    settings = BrokerSettings(ledger_url="memory://")  # type: ignore[call-arg]
    b = Broker(open_ledger_factory("memory://"), settings, PendingAckClient(None, 1.0))
    await b.start()
    await b.create_topic(T, 1)
    yield b
    await b.close()


@pytest.mark.parametrize("sub_type", [SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER])
async def test_an_owner_gives_back_what_a_fetch_took_as_its_client_left(
        broker: Broker, sub_type: SubscriptionType) -> None:
    sub = await broker.create_subscription(T, "s", sub_type, "earliest")
    assert sub is not None
    ids = await broker.topic(T).produce([Outgoing(Message(b"m", request_index=0), 0)], None, None)
    poll = LongPoll()
    poll.gone = True
    poll.end()  # the client is gone by the time the fetch takes the message
    assert await _answered(sub, "c", 10, 30_000, None, poll) == []
    # The same consumer's next fetch (a reconnect) gets it: it is not left out with nobody.
    assert [m["message_id"] for m in await sub.fetch("c", 10, 0)] == ids
