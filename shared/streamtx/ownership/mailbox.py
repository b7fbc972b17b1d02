"""Redis as the batch buffer between the workers of one port: a mailbox stream per owned item.

Several worker processes serve one port (``STREAMTX_WORKERS``); the kernel hands
a connection to any of them, but each log has one owner (leases,
:mod:`.manager`). A worker that receives a request for an item a *sibling* owns
cannot redirect it (the sibling's URL is its own), so it posts the request to
the item's mailbox and waits for the answer; the owner drains its mailboxes in
batches and serves each batch concurrently in its own process, so the records
the batch appends reach the ledger as ONE batched entry (PIP-160) instead of
one entry per process.

Keys, under ``streamtx:<cluster>:<service>:``::

    mailbox:<item>     stream of requests for <item>; consumer group "owner"
    reply:<uuid>       list the answer to one request is pushed onto (expires)

A mailbox entry (stream fields, all bytes)::

    m   method            ("POST")
    p   path              ("/v1/transactions/281474976710656:7/commit")
    q   raw query string
    h   headers, JSON [[name, value], ...] (latin-1 text; authorization goes along:
        the owner checks the caller's credentials itself), with ``streamtx-request-id``:
        the request's id (32 hex digits, also the reply key's), set by the receiving
        worker over any the client sent
    b   body
    r   the reply key
    d   deadline, ms since the epoch: the caller gives up then (503), and an
        owner that reads the entry later drops it unserved

An answer (the one element LPUSHed to the reply key, which expires after the
caller's wait): ``{"s": status, "h": [[name, value], ...]}`` as JSON, a newline,
then the body bytes.

The owner of an item reads its mailbox with XREADGROUP (up to ``max_batch``
entries a read, while fewer than ``4 * max_batch`` are in flight) and starts
every request of the read at once; each, when done, has its answer pushed and
its entry XACKed and XDELed: an entry leaves the stream only once it is
answered, and a slow request (a commit whose participant retries) holds up no
other. A worker that
dies leaves its read-but-unanswered entries in the group's pending list; the
next owner of the item first claims them (XAUTOCLAIM) and serves them, then
reads new ones. An entry can therefore be served twice (its owner died after
serving, before the XACK): the owner records each request's id in the log
records it appends, so the next owner, having replayed the log, answers such
a request from its state instead of applying it again (the coordinator's
FORWARDED records); the requests that travel here are idempotent besides.
Creation of new logs
or ids stays with the worker that receives it.

Metrics (forwarded calls and their wait, batch sizes, served, expired, Redis
errors): :mod:`.mailbox_metrics`.

A mailbox holds at most ``max_queued`` requests: past that the caller answers
503 at once (the owner is behind; retry) rather than let Redis fill up. Only
authenticated requests come this far (the forwarding layer checks the token
first; the owner checks it again when it plays the request).

Redis down: the caller's XADD or BLPOP fails, or its wait ends, and it answers
503 (retry). Nothing a caller was answered 200 for depends on Redis afterwards:
the owner answers only after its ledger append.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

# redis is imported with the first Redis client, not with the service (issue 25: restarts).
if TYPE_CHECKING:
    import redis.asyncio as redis

from streamtx.errors import UnavailableError
from streamtx.ownership import mailbox_metrics as metrics
from streamtx.service.inprocess import Answer, Call

__all__ = ["REQUEST_ID", "Mailbox", "decode_answer", "decode_call", "encode_answer", "encode_call"]

log = logging.getLogger(__name__)

Serve = Callable[[Call], Awaitable[Answer]]

#: The header carrying a forwarded request's id to the owner.
REQUEST_ID = b"streamtx-request-id"

_group = "owner"
_block_ms = 1000  # how long one XREADGROUP waits: the drain notices it should stop within this
_retry_s = 0.5  # after a Redis error on the owner side
_answer_attempts = 3

# KEYS: the mailbox; ARGV: the cap, then field, value, ... The entry's id, or nil when full.
_post = """
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[1]) then
  return false
end
return redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))
"""


# -- wire format (pure) ---------------------------------------------------------------
def encode_call(call: Call, reply: str, deadline_ms: int) -> dict[bytes, bytes]:
    headers = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in call.headers]
    return {b"m": call.method.encode(), b"p": call.path.encode(), b"q": call.query,
            b"h": orjson.dumps(headers), b"b": call.body, b"r": reply.encode(), b"d": b"%d" % deadline_ms}


def decode_call(fields: dict[bytes, bytes]) -> tuple[Call, str, int]:
    """The request, its reply key and its deadline."""
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in orjson.loads(fields[b"h"])]
    call = Call(fields[b"m"].decode(), fields[b"p"].decode(), fields.get(b"q", b""), headers,
                fields.get(b"b", b""))
    return call, fields[b"r"].decode(), int(fields[b"d"])


def encode_answer(answer: Answer) -> bytes:
    head = {"s": answer.status, "h": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in answer.headers]}
    return orjson.dumps(head) + b"\n" + answer.body


def decode_answer(data: bytes) -> Answer:
    head_raw, _, body = data.partition(b"\n")
    head = orjson.loads(head_raw)
    return Answer(int(head["s"]), [(k.encode("latin-1"), v.encode("latin-1")) for k, v in head["h"]], body)


def _failed(exc: BaseException) -> Answer:
    log.error("mailbox: serving a request failed: %r", exc)
    body = orjson.dumps({"error": "internal", "message": f"internal error: {type(exc).__name__}"})
    return Answer(500, [(b"content-type", b"application/json")], body)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class _Drain:
    task: asyncio.Task[None]
    serving: set[asyncio.Task[None]] = field(default_factory=set)  # one per request in flight
    stopping: bool = False


class Mailbox:
    """The mailboxes of one service of one cluster: post and wait (any worker), drain (the owner)."""

    def __init__(self, client: redis.Redis, *, cluster: str, service: str, consumer: str,
                 timeout_s: float, max_batch: int, max_queued: int = 10_000) -> None:
        """``client`` must answer bytes (no ``decode_responses``); ``consumer``: this worker's member name;
        ``max_queued``: requests one mailbox holds at most (then 503)."""
        self._r = client
        self._post = client.register_script(_post)
        self.max_queued = max_queued
        self._prefix = f"streamtx:{cluster}:{service}:"
        self.consumer = consumer
        self.timeout_s = timeout_s
        self.max_batch = max_batch
        self._drains: dict[str, _Drain] = {}
        self.max_in_flight = 4 * max_batch  # requests one item serves at once; then it reads no more
        self.served = 0  # entries this worker served as owner
        self.replayed = 0  # of which claimed from a previous owner's pending list
        self._labels = (cluster, service)

    @classmethod
    def from_url(cls, url: str, **kw: object) -> Mailbox:
        import redis.asyncio as redis

        # No socket timeout: BLPOP and XREADGROUP block on purpose; every wait has its own bound.
        client = redis.Redis.from_url(url, socket_connect_timeout=2.0, socket_timeout=None,
                                      health_check_interval=10)
        return cls(client, **kw)  # type: ignore[arg-type]

    def key(self, item: str) -> str:
        return f"{self._prefix}mailbox:{item}"

    # -- the receiving worker -----------------------------------------------------------
    async def call(self, item: str, call: Call) -> Answer:
        """Post ``call`` to ``item``'s owner and wait for its answer; 503 when Redis fails or
        no answer comes within the timeout (the request may still be served: it is idempotent)."""
        from redis.exceptions import RedisError

        request_id = uuid.uuid4().hex
        reply = f"{self._prefix}reply:{request_id}"
        # The owner records the id with what the request appends (its log's codec says how),
        # so a next owner that finds the entry still pending knows it was applied.
        call.headers = [(k, v) for k, v in call.headers if k.lower() != REQUEST_ID] + \
            [(REQUEST_ID, request_id.encode())]
        deadline = _now_ms() + int(self.timeout_s * 1000)
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.timeout_s + 2):
                fields = [x for kv in encode_call(call, reply, deadline).items() for x in kv]
                posted = await self._post(keys=[self.key(item)], args=[self.max_queued, *fields])
                got: Any = None if posted is None else await self._r.blpop([reply], timeout=self.timeout_s)
        except (RedisError, OSError, TimeoutError) as exc:
            self._called("error", started)
            metrics.errors.labels(*self._labels, "caller", type(exc).__name__).inc()
            raise UnavailableError(f"the batch buffer (Redis) failed: {type(exc).__name__}: {exc}") from None
        if posted is None:
            self._called("full", started)
            raise UnavailableError(f"{item}'s mailbox holds {self.max_queued} requests already: its owner "
                                   "is behind; retry")
        if got is None:
            self._called("timeout", started)
            raise UnavailableError(f"{item}'s owner did not answer within {self.timeout_s:g}s (moving?)")
        self._called("answered", started)
        return decode_answer(got[1])

    def _called(self, outcome: str, started: float) -> None:
        metrics.forwarded.labels(*self._labels, outcome).inc()
        metrics.wait_seconds.labels(*self._labels, outcome).observe(time.monotonic() - started)

    # -- the owner --------------------------------------------------------------------
    def own(self, item: str, serve: Serve) -> None:
        """Start draining ``item``'s mailbox: first what a previous owner left pending, then new entries."""
        if item in self._drains:
            return
        drain = _Drain(asyncio.get_running_loop().create_task(self._drain(item, serve),
                                                              name=f"mailbox-{item}"))
        self._drains[item] = drain

        def forget(_: asyncio.Task[None]) -> None:
            if self._drains.get(item) is drain:
                del self._drains[item]

        drain.task.add_done_callback(forget)

    async def disown(self, item: str, grace_s: float = 5.0) -> None:
        """Stop draining ``item``: no more reads; the requests in flight get ``grace_s`` to finish
        and be answered, the rest stay pending for the next owner (which serves them again)."""
        drain = self._drains.pop(item, None)
        if drain is None:
            return
        drain.stopping = True
        drain.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await drain.task
        if drain.serving:
            _, late = await asyncio.wait(drain.serving, timeout=grace_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    @property
    def draining(self) -> list[str]:
        return sorted(self._drains)

    async def aclose(self) -> None:
        for item in list(self._drains):
            await self.disown(item)
        await self._r.aclose()

    async def _drain(self, item: str, serve: Serve) -> None:
        from redis.exceptions import ResponseError

        key = self.key(item)
        drain = self._drains[item]
        claimed = False
        while not drain.stopping:
            try:
                room = self.max_in_flight - len(drain.serving)
                if room <= 0:  # full: wait for one to finish (its answer is sent by then)
                    await asyncio.wait(drain.serving, return_when=asyncio.FIRST_COMPLETED)
                    continue
                async with asyncio.timeout(_block_ms / 1000 + 10):
                    if not claimed:
                        await self._ensure_group(key)
                        await self._claim(key, drain, serve)
                        claimed = True
                        continue
                    got: Any = await self._r.xreadgroup(_group, self.consumer, {key: ">"},
                                                        count=min(room, self.max_batch), block=_block_ms)
                if got:
                    await self._start(key, got[0][1], drain, serve)
            except asyncio.CancelledError:
                raise
            except ResponseError as exc:
                metrics.errors.labels(*self._labels, "owner", type(exc).__name__).inc()
                if "NOGROUP" in str(exc):  # Redis restarted empty: make the group again
                    claimed = False
                    continue
                log.warning("mailbox %s: %r", item, exc)
                await asyncio.sleep(_retry_s)
            except Exception as exc:  # Redis down: callers answer 503 meanwhile; keep trying
                metrics.errors.labels(*self._labels, "owner", type(exc).__name__).inc()
                log.warning("mailbox %s: %r", item, exc)
                claimed = False
                await asyncio.sleep(_retry_s)

    async def _ensure_group(self, key: str) -> None:
        from redis.exceptions import ResponseError

        try:
            # From the stream's start: entries posted before anyone owned the item are served too.
            await self._r.xgroup_create(key, _group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _claim(self, key: str, drain: _Drain, serve: Serve) -> None:
        """Serve what previous owners read but did not answer (they died or gave the item up)."""
        start: bytes | str = "0-0"
        while not drain.stopping:
            out: Any = await self._r.xautoclaim(key, _group, self.consumer, min_idle_time=0, start_id=start,
                                                count=self.max_batch)
            start, entries = out[0], [e for e in out[1] if e[1]]  # (deleted ones come back empty)
            if entries:
                self.replayed += len(entries)
                log.info("mailbox %s: serving %d requests left by a previous owner", key, len(entries))
                await self._start(key, entries, drain, serve, replayed=True)
            if start in (b"0-0", "0-0"):
                return

    async def _start(self, key: str, entries: list[tuple[bytes, dict[bytes, bytes]]], drain: _Drain,
                     serve: Serve, *, replayed: bool = False) -> None:
        """Serve a batch read from the stream: every request at once, so the log records they
        append meet in the writer's buffer and reach the ledger as one batched entry; each is
        answered as soon as it is done (a slow commit holds up no other request)."""
        metrics.batch_requests.labels(*self._labels).observe(len(entries))
        now = _now_ms()
        expired = []
        for entry_id, fields in entries:
            call, reply, deadline = decode_call(fields)
            if deadline <= now:  # its caller answered 503 already
                expired.append(entry_id)
                continue
            task = asyncio.get_running_loop().create_task(
                self._serve_one(key, entry_id, call, reply, serve, replayed))
            drain.serving.add(task)
            task.add_done_callback(drain.serving.discard)
        if expired:
            metrics.expired.labels(*self._labels).inc(len(expired))
            async with self._r.pipeline(transaction=False) as p:
                p.xack(key, _group, *expired)
                p.xdel(key, *expired)
                await p.execute()

    async def _serve_one(self, key: str, entry_id: bytes, call: Call, reply: str, serve: Serve,
                         replayed: bool) -> None:
        from redis.exceptions import RedisError

        try:
            answer = await serve(call)
        except Exception as exc:
            answer = _failed(exc)
        data = encode_answer(answer)
        for attempt in range(_answer_attempts):
            try:
                async with self._r.pipeline(transaction=False) as p:
                    p.lpush(reply, data)
                    p.pexpire(reply, int(self.timeout_s * 1000) + 5000)
                    p.xack(key, _group, entry_id)  # only once answered: else the next owner serves it
                    p.xdel(key, entry_id)
                    await p.execute()
                self.served += 1
                metrics.served.labels(*self._labels, "true" if replayed else "false").inc()
                return
            except (RedisError, OSError) as exc:
                metrics.errors.labels(*self._labels, "owner", type(exc).__name__).inc()
                # After Redis restarted, the pool's first pipeline fails on a dead connection
                # (redis-py's own retry does not cover it): the caller would wait its whole
                # timeout. Again on a fresh connection; a second answer is harmless (the
                # caller takes the first, the list expires).
                log.warning("mailbox %s: answering %s failed (%d): %r", key, entry_id, attempt + 1, exc)
                await asyncio.sleep(_retry_s * attempt)
