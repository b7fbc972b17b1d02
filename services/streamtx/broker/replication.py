"""The broker's side of geo-replication: replicator cursors, reads for a remote, replicated writes.

The replication controller does the work (which topics go where, sending,
retrying); the broker owns the durable state it needs, as Pulsar's does:

* a durable cursor ``pulsar.repl.<remote>`` per partition and remote cluster:
  what the controller has delivered there. It is not a subscription (no
  consumer sees it), but it holds back trimming like one;
* reads for a remote: the partition's local entries after a position, up to
  ``maxReadPosition`` - committed messages without their transaction ids,
  replication markers written here - skipping aborted messages, commit and
  abort markers, and every entry that was itself replicated in (no loops);
* replicated writes: each copied entry keeps its source cluster and position
  (:class:`~streamtx.broker.codec.SourceInfo`) and is appended under the
  producer ``pulsar.repl.<source>`` whose sequence is the source entry id, so a
  partition drops an entry it already has (exactly once across crashes); a
  snapshot request copied in is answered right away (PIP-33's response marker);
* the per-remote counters behind topic stats' ``replication`` section and the
  ``pulsar_replication_*`` metrics.
"""

from __future__ import annotations

import asyncio
import time
from binascii import a2b_base64, b2a_base64
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson
from pydantic import BaseModel, Field

from streamtx.broker import codec, markers
from streamtx.broker.codec import EntryKind, ProducerInfo, SourceInfo
from streamtx.broker.partition import Partition
from streamtx.cursor import Cursor
from streamtx.errors import MalformedError
from streamtx.ledger import LedgerFactory, Position

#: Replication markers that stay where they were written (see :mod:`streamtx.broker.markers`).
LOCAL_ONLY = frozenset({"snapshot"})
rate_window_s = 10.0  # msgRateIn/Out are averaged over this many seconds


def cursor_name(remote: str) -> str:
    """Pulsar's name of the replicator cursor for ``remote``."""
    return f"pulsar.repl.{remote}"


def producer_name(source: str) -> str:
    """The producer a partition dedups entries replicated from ``source`` by."""
    return f"pulsar.repl.{source}"


class Meter:
    """A count and its rate over the last ``rate_window_s``."""

    def __init__(self) -> None:
        self.total = 0
        self.bytes = 0
        self._recent: deque[tuple[float, int, int]] = deque()

    def add(self, n: int, size: int) -> None:
        self.total += n
        self.bytes += size
        now = time.monotonic()
        self._recent.append((now, n, size))
        self._drop(now)

    def _drop(self, now: float) -> None:
        while self._recent and now - self._recent[0][0] > rate_window_s:
            self._recent.popleft()

    def rates(self) -> tuple[float, float]:
        """(messages/s, bytes/s) over the window."""
        self._drop(time.monotonic())
        n = sum(r[1] for r in self._recent)
        b = sum(r[2] for r in self._recent)
        return n / rate_window_s, b / rate_window_s


class RemoteLink:
    """One topic's replication towards one remote cluster: cursors per partition, counters."""

    def __init__(self, remote: str, cursors: list[Cursor]) -> None:
        self.remote = remote
        self.cursors = cursors
        self.out = Meter()
        self.reaches = [False] * len(cursors)  # per partition, as its replicator last said
        self.backlog = 0  # as of the last refresh
        self.delay_s = 0.0

    @property
    def connected(self) -> bool:
        """Every partition's replicator reaches the remote cluster."""
        return all(self.reaches)


def _next(part: Partition, pos: Position) -> Position:
    return Position(pos.ledger_id, part.ledger.next_entry_id(pos.entry_id))


async def read_local(part: Partition, start: Position, max_entries: int
                     ) -> tuple[list[dict[str, Any]], Position | None]:
    """What to send from ``start`` on: ``(items, last position scanned)``.

    An item is ``{"position", "publish_time", "messages": [...]}`` or ``{..., "marker": {...}}``.
    """
    entries = await part.read_visible(start, max_entries)
    items: list[dict[str, Any]] = []
    for e in entries:
        h = codec.decode_header(e.data)
        if h.source is not None:
            continue  # replicated in: its source cluster sends it everywhere itself
        item: dict[str, Any] = {"position": str(e.position), "publish_time": h.publish_time_ms}
        if h.kind is EntryKind.BATCH:
            if h.txn is not None and part.tb.is_aborted(h.txn):
                continue
            item["messages"] = [
                {"key": k, "value": b2a_base64(v, newline=False).decode("ascii"), "properties": p}
                for v, k, p, _ in codec.decode_fields(e.data, h)
            ]
        elif h.kind is EntryKind.MARKER:
            item["marker"] = orjson.loads(codec.marker_body(e.data, h))
            if item["marker"].get("type") in LOCAL_ONLY:
                continue
        else:
            continue
        items.append(item)
    return items, (entries[-1].position if entries else None)


class ReplicatedMessage(BaseModel):
    """One message of a replicated entry (``value`` base64)."""

    key: str | None = None
    value: str = ""
    properties: dict[str, str] = Field(default_factory=dict)


class ReplicatedEntry(BaseModel):
    """One source entry, as :func:`read_local` gives it: messages, or a marker."""

    position: str
    publish_time: int = Field(0, ge=0, lt=1 << 63)
    messages: list[ReplicatedMessage] | None = None
    marker: dict[str, Any] | None = None


def _parse_item(item: ReplicatedEntry, source: str, now_ms: int) -> tuple[bytes, ProducerInfo, int]:
    try:
        lid, eid, _ = codec.parse_message_id(item.position)
        if not (0 <= lid < 1 << 64 and 0 <= eid < 1 << 64):
            raise ValueError("out of range")
    except ValueError as exc:
        raise MalformedError(f"bad replicated entry position {item.position!r}: {exc}") from None
    src = SourceInfo(source, lid, eid, item.publish_time)
    producer = ProducerInfo(producer_name(source), 0, eid)
    if item.marker is not None:
        return codec.encode_replication_marker(orjson.dumps(item.marker), publish_time_ms=now_ms,
                                               producer=producer, source=src), producer, 0
    if not item.messages:
        raise MalformedError("a replicated entry needs messages or a marker")
    try:
        out = [codec.Message(a2b_base64(m.value), m.key, m.properties, i)
               for i, m in enumerate(item.messages)]
    except ValueError as exc:
        raise MalformedError(f"bad replicated message value: {exc}") from None
    data = codec.encode_batch(out, publish_time_ms=now_ms, producer=producer, source=src)
    return data, producer, len(out)


async def write_replicated(part: Partition, source: str, items: list[ReplicatedEntry], cluster: str
                           ) -> tuple[int, int]:
    """Append the copies in order, dropping what this partition already has: ``(written, dropped)``.

    A snapshot request among them is answered at once (this is ``cluster``): the
    response marker follows the request in this partition.
    """
    now_ms = int(time.time() * 1000)
    parsed = [_parse_item(item, source, now_ms) for item in items]
    started = [(item, f) for item, (data, producer, count) in zip(items, parsed, strict=True)
               if (f := part.start_replicated(data, producer, count, now_ms)) is not None]
    if started:
        positions = await asyncio.gather(*(f for _, f in started))
        for (item, _), pos in zip(started, positions, strict=True):
            m = item.marker
            if m is not None and m.get("type") == "snapshot_request" and m.get("source_cluster") != cluster:
                await part.append_marker(orjson.dumps(markers.response(m, cluster, pos)))
    return len(started), len(parsed) - len(started)


class Replication:
    """The broker's replication state of every topic: links per remote, incoming counters."""

    def __init__(self, store: LedgerFactory, cluster: str) -> None:
        self.store = store
        self.cluster = cluster
        self.links: dict[tuple[str, str], RemoteLink] = {}  # (topic, remote)
        self.incoming: dict[tuple[str, str], Meter] = {}  # (topic, source cluster)
        self._lock = asyncio.Lock()

    async def link(self, topic: str, partitions: list[Partition], remote: str) -> RemoteLink:
        """The link (its cursors opened on first use)."""
        got = self.links.get((topic, remote))
        if got is not None:
            return got
        async with self._lock:
            got = self.links.get((topic, remote))
            if got is None:
                cursors = [await Cursor.open(self.store, p.ledger, cursor_name(remote)) for p in partitions]
                got = self.links[(topic, remote)] = RemoteLink(remote, cursors)
            return got

    def incoming_meter(self, topic: str, source: str) -> Meter:
        return self.incoming.setdefault((topic, source), Meter())

    def first_unreplicated(self, topic: str, index: int) -> Position | None:
        """The lowest position some remote still needs on this partition (trimming stops there)."""
        firsts = [link.cursors[index].first_undeleted() for (t, _), link in self.links.items() if t == topic]
        return min(firsts, default=None)

    async def stats(self, topic: str, partitions: list[Partition]) -> dict[str, dict[str, Any]]:
        """Topic stats' ``replication`` section: one entry per remote cluster."""
        out: dict[str, dict[str, Any]] = {}
        remotes = {r for (t, r) in self.links if t == topic} | {s for (t, s) in self.incoming if t == topic}
        for remote in sorted(remotes):
            link = self.links.get((topic, remote))
            inc = self.incoming.get((topic, remote))
            rate_in, tput_in = inc.rates() if inc else (0.0, 0.0)
            rate_out, tput_out = link.out.rates() if link else (0.0, 0.0)
            backlog, delay = (await self._backlog(link, partitions)) if link else (0, 0.0)
            if link:
                link.backlog, link.delay_s = backlog, delay
            out[remote] = {
                "msgRateIn": rate_in, "msgThroughputIn": tput_in, "msgInCounter": inc.total if inc else 0,
                "msgRateOut": rate_out, "msgThroughputOut": tput_out,
                "msgOutCounter": link.out.total if link else 0,
                "replicationBacklog": backlog, "replicationDelayInSeconds": delay,
                "connected": bool(link and link.connected),
            }
        return out

    async def _backlog(self, link: RemoteLink, partitions: list[Partition]) -> tuple[int, float]:
        """Entries not yet replicated (up to maxReadPosition) and the age of the oldest, in s.

        The count is the span of entry ids, which may include ids of entries that are
        never sent (aborted messages, markers): Pulsar counts entries too.
        """
        backlog, oldest_ms = 0, None
        for part, cursor in zip(partitions, link.cursors, strict=True):
            limit = part.max_read_position()
            first = cursor.first_undeleted()
            if limit is None or first > limit:
                continue
            backlog += limit.entry_id - first.entry_id + 1
            entries = await part.ledger.read(first, 1)
            if entries:
                t = codec.decode_header(entries[0].data).publish_time_ms
                oldest_ms = t if oldest_ms is None else min(oldest_ms, t)
        delay = 0.0 if oldest_ms is None else max(0.0, time.time() - oldest_ms / 1000)
        return backlog, delay

    async def refresh(self, partitions_of: Callable[[str], list[Partition]]) -> None:
        """Recompute every link's backlog and delay (what the metrics report)."""
        for (topic, _), link in list(self.links.items()):
            link.backlog, link.delay_s = await self._backlog(link, partitions_of(topic))

    def metric_values(self) -> dict[tuple[str, str], dict[str, float]]:
        """``(topic, remote) -> {metric suffix: value}`` for the ``pulsar_replication_*`` metrics."""
        out: dict[tuple[str, str], dict[str, float]] = {}
        for key in {*self.links, *self.incoming}:
            link, inc = self.links.get(key), self.incoming.get(key)
            rate_in, tput_in = inc.rates() if inc else (0.0, 0.0)
            rate_out, tput_out = link.out.rates() if link else (0.0, 0.0)
            out[key] = {"rate_in": rate_in, "throughput_in": tput_in, "rate_out": rate_out,
                        "throughput_out": tput_out, "backlog": link.backlog if link else 0,
                        "delay_in_seconds": link.delay_s if link else 0.0,
                        "connected_count": 1.0 if link and link.connected else 0.0}
        return out

    async def forget(self, topic: str) -> None:
        """Drop ``topic``'s links (broker replicas: another broker serves it now, and its
        replication cursors there are the ones the controller's calls move)."""
        for key in [k for k in self.links if k[0] == topic]:
            for c in self.links.pop(key).cursors:
                await c.close()
        for key in [k for k in self.incoming if k[0] == topic]:
            del self.incoming[key]

    async def close(self) -> None:
        for link in self.links.values():
            for c in link.cursors:
                await c.close()


def start_of(part: Partition, cursor: Cursor, after: str | None) -> Position:
    """Where a read for a remote starts: after ``after`` or at the cursor's first undeleted entry."""
    if after:
        try:
            pos = Position.parse(after)
        except ValueError:
            raise MalformedError(f"bad position {after!r}") from None
        return max(_next(part, pos), cursor.first_undeleted())
    return cursor.first_undeleted()
