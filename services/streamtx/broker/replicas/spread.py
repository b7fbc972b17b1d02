"""Requests on the name of a topic whose partitions are spread over broker replicas: fanned out.

Broker replicas own partitions (:mod:`.replicas`). The SDK addresses each
partition by its own name, but the REST contract also takes the topic's name
(curl, the demo's jobs, the services' own clients), and on a spread topic no
replica holds every partition. The replica that receives such a request splits
it by partition: what concerns the partitions open here it serves itself, and
it forwards the rest, under the topic's name, to each other owner with the
header ``streamtx-partitions-here: 1`` (serve the partitions open here only;
never forwarded again), then puts the answers together:

- produce: messages routed here over all partitions (key, explicit, sticky,
  round robin, as one broker would), each owner stores its partitions' share;
  the ids come back in request order;
- fetch: every owner is asked with no wait first; if nobody has anything, all
  are long-polled together (the answer comes when every poll has: a poll
  abandoned half-way could leave messages handed to nobody); ``max`` is split
  over the owners; the answers are concatenated (binary or JSON);
- acks, nacks: each message id goes to its partition's owner (the partition
  is known from the id's ledger); transactional acks are recorded in the
  pending-ack store under the topic's name by each owner, as the caller
  registered it, and the store's end (``/v1/txn/subscriptions/end``, by the
  topic's name) fans out the same way;
- a consumer's partitions (Failover) are the union of the owners' answers
  (each owner sees the consumer, whose fetches reach every owner); closing it
  closes it everywhere; subscription stats are merged (:mod:`.fanout`);
- a ``latest`` subscription's creation: every other owner opens it before the
  answer (``routes/subscriptions.py``), so it starts on every partition then.

A partition that moves meanwhile makes its owner refuse its share (a 307 to
the forwarder): the whole request answers 503 ``not_owner``, and the caller
retries (a named producer's retry is deduplicated per partition).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

import httpx
import orjson

from streamtx.broker.replicas.plan import SpreadPlan
from streamtx.broker.topic import Outgoing, TxnCheck
from streamtx.contracts.msgid import MessageId
from streamtx.contracts.txnid import TxnId
from streamtx.errors import MalformedError, StreamtxError
from streamtx.records.partition import Message, ProducerInfo
from streamtx.service.longpoll import LongPoll
from streamtx.transport import ONCE, HttpClient
from streamtx.wire import batch as wire
from streamtx.wire import fetch as wire_fetch
from streamtx.wire.frame import MESSAGES, U32, prelude_of
from streamtx.wire.produce import Section, decode_produced_rows

__all__ = ["HERE", "Forwarder", "every_partition"]

#: The header of a forwarded request: serve the topic's name from the partitions open here.
HERE = "streamtx-partitions-here"

_messages_prelude = prelude_of(MESSAGES)
log = logging.getLogger(__name__)

T = TypeVar("T")


class Forwarder:
    """How a replica calls the other broker replicas (the service token): the one transport
    client's connections, shared by every owner (:meth:`owner`)."""

    def __init__(self, token: str | None, timeout_s: float) -> None:
        self._token = token
        self._timeout_s = timeout_s
        self._hub: HttpClient | None = None  # made on first use
        self._owners: dict[str, HttpClient] = {}

    def owner(self, url: str) -> HttpClient:
        """The client of one owner (it follows that owner's 307s, as any client does)."""
        client = self._owners.get(url)
        if client is None:
            if self._hub is None:
                self._hub = HttpClient("", retry=ONCE, timeout_s=self._timeout_s, token=self._token,
                                       max_connections=100)
            client = self._owners[url] = self._hub.at(url)
        return client

    async def send(self, owner: str, method: str, path: str, *, params: dict[str, Any] | None = None,
                   content: bytes | None = None, headers: dict[str, str] | None = None,
                   wait_s: float = 0.0) -> httpx.Response:
        """A share of a spread topic's request, served by ``owner`` from its partitions open there;
        a 307 (they moved meanwhile) is :class:`NotOwnerError`, never followed."""
        return await self.owner(owner).send(method, path, params=params, content=content,
                                            headers={**(headers or {}), HERE: "1"},
                                            timeout_s=self._timeout_s + wait_s, follow=False)

    async def aclose(self) -> None:
        if self._hub is not None:
            await self._hub.aclose()


def _group(plan: SpreadPlan, indexes: Sequence[int]) -> dict[str, list[int]]:
    """Positions in ``indexes`` (partition per item) by owner URL ("" for here)."""
    out: dict[str, list[int]] = {}
    for k, i in enumerate(indexes):
        out.setdefault(plan.owner_of(i) or "", []).append(k)
    return out


# --- produce ---------------------------------------------------------------------------

async def produce_json(fwd: Forwarder, plan: SpreadPlan, path: str, raw: list[Any], out: list[Outgoing],
                       txn: TxnId | None, producer: ProducerInfo | None, *,
                       check: TxnCheck | None = None) -> list[str]:
    """The ids of a JSON produce on a spread topic, in request order. ``check``: the transaction's
    door check of every routed partition, here with the caller, before any share is sent."""
    routed = plan.router.route(out, producer, check=False)
    if not routed and producer is not None:
        routed = {0: []}  # no messages: the producer's epoch is recorded on partition 0
    if check is not None:
        await check(routed)
    ids = [""] * len(out)

    async def share(index: int, msgs: list[Message]) -> None:
        owner = plan.owner_of(index)
        if owner is None:
            assert plan.topic is not None
            again = [Outgoing(Message(m.value, m.key, m.properties, k), index) for k, m in enumerate(msgs)]
            got = await plan.topic.produce(again, txn, producer, only=index)
        else:
            body: dict[str, Any] = {"messages": [{**raw[m.request_index], "partition": index} for m in msgs]}
            if txn is not None:
                body["txn_id"] = str(txn)
            if producer is not None:
                body["producer"] = {"name": producer.name, "epoch": producer.epoch,
                                    "sequence": producer.sequence}
            r = await fwd.send(owner, "POST", path, content=orjson.dumps(body),
                               headers={"content-type": "application/json"})
            got = list(orjson.loads(r.content)["message_ids"])
        for m, message_id in zip(msgs, got, strict=False):
            ids[m.request_index] = message_id

    await asyncio.gather(*(share(i, msgs) for i, msgs in routed.items()))
    return ids


async def produce_sections(fwd: Forwarder, plan: SpreadPlan, path: str, sections: list[Section],
                           local: Callable[[list[Section]], Awaitable[list[tuple[int, int, int]]]],
                           txn: TxnId | None, producer: ProducerInfo | None) -> list[tuple[int, int, int]]:
    """A binary produce on a spread topic: ``(ledger_id, entry_id, count)`` per section, in order."""
    if not sections and producer is not None:
        owner = plan.owner_of(0)
        if owner is None:
            return await local([])
        empty = wire.encode_produce([], txn=txn, producer=_ident(producer))
        await fwd.send(owner, "POST", path, content=empty, headers={"content-type": wire.CONTENT_TYPE})
        return []
    rows: list[tuple[int, int, int]] = [(0, 0, 0)] * len(sections)

    async def share(owner: str, positions: list[int]) -> None:
        mine = [sections[k] for k in positions]
        if not owner:
            got = await local(mine)
        else:
            body = wire.encode_produce(
                [(s.partition, [wire.Msg(*m) for m in wire.decode_messages(s.body, s.count)]) for s in mine],
                txn=txn, producer=_ident(producer))
            r = await fwd.send(owner, "POST", path, content=body, headers={"content-type": wire.CONTENT_TYPE})
            got = decode_produced_rows(r.content)
        for k, row in zip(positions, got, strict=True):
            rows[k] = row

    await asyncio.gather(*(share(o, pos) for o, pos in _group(plan, [s.partition for s in sections]).items()))
    return rows


def _ident(producer: ProducerInfo | None) -> tuple[str, int, int] | None:
    return None if producer is None else (producer.name, producer.epoch, producer.sequence)


# --- fetch -----------------------------------------------------------------------------

LocalFetch = Callable[[list[int], int, int], Awaitable[bytes]]


async def fetch(fwd: Forwarder, plan: SpreadPlan, path: str, params: dict[str, Any], asked: list[int] | None,
                max_messages: int, wait_ms: int, binary: bool, local: LocalFetch,
                poll: LongPoll | None = None) -> bytes:
    """A fetch on a spread topic: each owner's partitions (of ``asked``), put together.

    ``poll`` ends (the client left, the service stops): the polls forwarded to other owners end
    with it (cancelled: each owner sees its client leave and gives back what it took then), and
    when the client left, what an owner's answer carried all the same is nacked on that owner
    (``local`` gives back its own share): nobody would ever receive it."""
    want = set(range(plan.count) if asked is None else asked)
    groups: dict[str, list[int]] = {}
    if mine := [i for i in plan.local if i in want]:
        groups[""] = mine
    for owner, idx in plan.remote.items():
        if theirs := [i for i in idx if i in want]:
            groups[owner] = theirs
    if not groups:
        return _merge([], binary)
    per = max(1, -(-max_messages // len(groups)))
    headers = {"accept": wire.CONTENT_TYPE} if binary else {}

    async def one(owner: str, idx: list[int], wait: int) -> bytes:
        if not owner:
            return await local(idx, per, wait)
        q = {**params, "max": per, "wait_ms": wait, "partitions": ",".join(map(str, idx))}
        return (await fwd.send(owner, "GET", path, params=q, headers=headers, wait_s=wait / 1000)).content

    async def round_of(wait: int) -> list[bytes]:
        calls = {o: asyncio.ensure_future(one(o, idx, wait)) for o, idx in groups.items()}
        await _until_answered_or_ended(calls, poll)
        got = {o: _outcome(c) for o, c in calls.items()}
        answers = {o: a for o, a in got.items() if isinstance(a, bytes)}
        if poll is not None and poll.gone:  # the answer goes nowhere: what it carries goes back
            await _give_back(fwd, path, {o: a for o, a in answers.items() if o}, binary)
            return []
        failed = [a for a in got.values() if isinstance(a, BaseException)]
        # What an owner handed out is the consumer's now: never dropped for another's failure.
        if failed and not any(_count(a, binary) for a in answers.values()):
            raise failed[0]
        return list(answers.values())

    answers = await round_of(0)
    if wait_ms > 0 and not any(_count(a, binary) for a in answers) and not (poll is not None and poll.ended):
        answers = await round_of(wait_ms)
    return _merge(answers, binary)


async def _until_answered_or_ended(calls: Mapping[str, asyncio.Future[bytes]], poll: LongPoll | None) -> None:
    """Wait for every call, or for ``poll`` to end: then the forwarded ones ("" is the local
    share, which ends with the poll by itself) are cancelled and waited for."""
    everything: asyncio.Future[Any] = asyncio.gather(*calls.values(), return_exceptions=True)
    if poll is None:
        await everything
        return
    ended: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    poll.watch(ended)
    try:
        await asyncio.wait([everything, ended], return_when=asyncio.FIRST_COMPLETED)
    finally:
        poll.unwatch(ended)
    if not everything.done():
        for owner, call in calls.items():
            if owner:
                call.cancel()
    await everything


def _outcome(call: asyncio.Future[bytes]) -> bytes | BaseException | None:
    """A finished call's answer, its error, or None when it was cancelled (no answer)."""
    if call.cancelled():
        return None
    return call.exception() or call.result()


async def _give_back(fwd: Forwarder, path: str, answers: dict[str, bytes], binary: bool) -> None:
    """Nack on each owner what its answer handed out (a fetch path ``.../messages``)."""
    nacks = path.rsplit("/", 1)[0] + "/nacks"

    async def one(owner: str, answer: bytes) -> None:
        ids = _ids(answer, binary)
        if not ids:
            return
        try:
            await fwd.send(owner, "POST", nacks, content=orjson.dumps({"message_ids": ids}),
                           headers={"content-type": "application/json"})
        except StreamtxError as exc:  # as for a consumer that never acks: the ack timeout, a new owner
            log.warning("giving back %d messages on %s failed: %s", len(ids), owner, exc)

    await asyncio.gather(*(one(o, a) for o, a in answers.items()))


def _ids(answer: bytes, binary: bool) -> list[str]:
    if binary and answer.startswith(_messages_prelude):
        return [m.message_id for m in wire_fetch.decode_messages_answer(answer)]
    return [str(m["message_id"]) for m in orjson.loads(answer)["messages"]]


def _count(answer: bytes, binary: bool) -> int:
    if binary and answer.startswith(_messages_prelude):
        return int(U32.unpack_from(answer, len(_messages_prelude))[0])
    return len(orjson.loads(answer)["messages"])


def _merge(answers: list[bytes], binary: bool) -> bytes:
    if binary:
        n = sum(_count(a, True) for a in answers)
        start = len(_messages_prelude) + 4
        return b"".join([_messages_prelude, U32.pack(n), *(a[start:] for a in answers)])
    return orjson.dumps({"messages": [m for a in answers for m in orjson.loads(a)["messages"]]})


# --- acks, nacks, consumers ----------------------------------------------------------------

def by_owner(plan: SpreadPlan, ids: list[MessageId]) -> dict[str, list[MessageId]]:
    """Message ids by the owner of their partition ("" for here); 400 for an id of no partition."""
    out: dict[str, list[MessageId]] = {}
    for mid in ids:
        index = plan.ledgers.get(mid.ledger_id)
        if index is None:
            raise MalformedError(f"message id {mid} is not of topic {plan.name}")
        out.setdefault(plan.owner_of(index) or "", []).append(mid)
    return out


async def acks(fwd: Forwarder, plan: SpreadPlan, path: str, ids: list[MessageId], txn: TxnId | None,
               cumulative: bool, binary: bool, local: Callable[[list[MessageId]], Awaitable[None]]) -> None:
    """Each owner acks its partitions' ids (each refuses one its partition never dispatched: 400)."""
    async def share(owner: str, mine: list[MessageId]) -> None:
        if not owner:
            await local(mine)
        elif binary:
            content = wire.encode_acks(mine, txn=txn, cumulative=cumulative)
            await fwd.send(owner, "POST", path, content=content, headers={"content-type": wire.CONTENT_TYPE})
        else:
            body: dict[str, Any] = {"message_ids": [str(m) for m in mine], "cumulative": cumulative}
            if txn is not None:
                body["txn_id"] = str(txn)
            await fwd.send(owner, "POST", path, content=orjson.dumps(body),
                           headers={"content-type": "application/json"})

    await asyncio.gather(*(share(o, mine) for o, mine in by_owner(plan, ids).items()))


async def everywhere(fwd: Forwarder, plan: SpreadPlan, method: str, path: str, body: bytes | None,
                     local: Callable[[], Coroutine[Any, Any, Any]]) -> list[Any]:
    """The same request served here (if any partition is) and by every other owner: the answers
    (JSON decoded for the others')."""
    async def remote(owner: str) -> Any:
        headers = {"content-type": "application/json"} if body is not None else None
        r = await fwd.send(owner, method, path, content=body, headers=headers)
        return orjson.loads(r.content) if r.content else None

    calls = [remote(o) for o in plan.remote]
    if plan.topic is not None and plan.local:
        calls.append(local())
    return list(await asyncio.gather(*calls))


# --- per-partition admin calls -------------------------------------------------------------

def every_partition(what: str, indexes: Sequence[int], got: Sequence[T | BaseException]) -> list[T]:
    """The answers of a call made on each partition (``got[k]`` of ``indexes[k]``), or, as Pulsar
    answers a partitioned topic's admin call, an error when any partition failed: of the first
    failure's kind (its status; retriable if any failure is), naming what failed and what did not."""
    failed = [(i, a) for i, a in zip(indexes, got, strict=True) if isinstance(a, BaseException)]
    if not failed:
        return [a for a in got if not isinstance(a, BaseException)]
    first = failed[0][1]
    if not isinstance(first, StreamtxError):
        raise first  # a bug, not an answer
    done = [i for i, a in zip(indexes, got, strict=True) if not isinstance(a, BaseException)]
    reasons = "; ".join(f"partition {i}: {_reason(a)}" for i, a in failed)
    err = type(first)(f"{what}: {len(failed)} of {len(indexes)} partitions failed (done: {done}); {reasons}")
    err.status = first.status
    err.retriable = any(getattr(a, "retriable", False) for _, a in failed)
    raise err from first


def _reason(exc: BaseException) -> str:
    return exc.message if isinstance(exc, StreamtxError) else repr(exc)
