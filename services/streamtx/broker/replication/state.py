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
  (:class:`~streamtx.records.partition.SourceInfo`) and is appended under the
  producer ``pulsar.repl.<source>`` whose sequence is the source entry id, so a
  partition drops an entry it already has (exactly once across crashes); a
  snapshot request copied in is answered right away (PIP-33's response marker);
* the per-remote counters behind topic stats' ``replication`` section and the
  ``pulsar_replication_*`` metrics.
"""

from __future__ import annotations

import asyncio
import math
import time
from binascii import a2b_base64, b2a_base64
from collections import deque
from typing import Any

import orjson

from streamtx.broker.partition import Partition
from streamtx.broker.replication import markers
from streamtx.contracts.msgid import MessageId
from streamtx.contracts.replication import ReplicatedEntry
from streamtx.cursor import Cursor, cursor_ledger_name
from streamtx.errors import MalformedError
from streamtx.ledger import LedgerFactory, Position
from streamtx.records import partition as codec
from streamtx.records.partition import EntryKind, ProducerInfo, SourceInfo

#: Replication markers that stay where they were written (see :mod:`streamtx.broker.replication.markers`).
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


class PartitionLink:
    """One partition's replication towards one remote cluster: its cursor, counters.

    Per partition, because a partition is what a broker replica owns: the cursor is
    subscription state of the partition and opens on whichever broker owns it now.
    """

    def __init__(self, remote: str, part: Partition, cursor: Cursor) -> None:
        self.remote = remote
        self.part = part
        self.cursor = cursor
        self.out = Meter()
        self.reaches = False  # as its replicator last said
        self.backlog = 0  # as of the last refresh
        self.delay_s = 0.0


#: Topic stats' ``replication`` row fields, by how partitions' rows combine.
_summed_fields = ("msgRateIn", "msgThroughputIn", "msgInCounter", "msgRateOut", "msgThroughputOut",
                  "msgOutCounter", "replicationBacklog")


def combine(per_partition: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """A topic's ``replication`` section from one section per partition (pure).

    Counts and rates add up, the delay is the oldest partition's, and a remote is
    ``connected`` only if every partition's replicator reaches it (a partition
    without a row for it has no replicator yet).
    """
    out: dict[str, dict[str, Any]] = {}
    for remote in sorted({r for p in per_partition for r in p}):
        rows = [p.get(remote) for p in per_partition]
        present = [r for r in rows if r is not None]
        row: dict[str, Any] = {k: sum(r[k] for r in present) for k in _summed_fields}
        row["replicationDelayInSeconds"] = max(r["replicationDelayInSeconds"] for r in present)
        row["connected"] = all(r is not None and r["connected"] for r in rows)
        out[remote] = row
    return out


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


def marker_bytes(marker: dict[str, Any]) -> bytes:
    """A replicated marker as the partition stores it: JSON, as orjson writes it. Any JSON number
    is a valid marker value (the schema says ``number``); one past the 64 bits orjson writes is
    held as a double, as orjson reads such a number back (it was a 500: the fuzzer's
    -49373364500454540170791747584). A lone surrogate (no UTF-8): 400."""
    try:
        return orjson.dumps(marker)
    except TypeError:
        pass
    try:
        return orjson.dumps(_as_doubles(marker))
    except TypeError as exc:
        raise MalformedError(f"bad replication marker: {exc}") from None


def _as_doubles(value: Any) -> Any:
    if type(value) is int and not -(1 << 63) <= value < (1 << 64):
        try:
            return float(value)
        except OverflowError:  # past a double: infinite, as a reader of doubles has it (written as null)
            return math.inf if value > 0 else -math.inf
    if isinstance(value, dict):
        return {k: _as_doubles(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_doubles(v) for v in value]
    return value


def _parse_item(item: ReplicatedEntry, source: str, now_ms: int) -> tuple[bytes, ProducerInfo, int]:
    try:
        lid, eid, _ = MessageId.parse(item.position)
    except MalformedError as exc:
        raise MalformedError(f"bad replicated entry position: {exc.message}") from None
    src = SourceInfo(source, lid, eid, item.publish_time)
    producer = ProducerInfo(producer_name(source), 0, eid)
    if item.marker is not None:
        return codec.encode_replication_marker(marker_bytes(item.marker), publish_time_ms=now_ms,
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
    """The broker's replication state of the partitions open here: links per remote, incoming counters."""

    def __init__(self, ledgers: LedgerFactory, cluster: str) -> None:
        self.ledgers = ledgers
        self.cluster = cluster
        self.links: dict[tuple[str, int, str], PartitionLink] = {}  # (topic, partition, remote)
        self.incoming: dict[tuple[str, int, str], Meter] = {}  # (topic, partition, source cluster)
        self._lock = asyncio.Lock()

    async def link(self, topic: str, index: int, part: Partition, remote: str) -> PartitionLink:
        """The link of a partition open here (its cursor opened on first use)."""
        key = (topic, index, remote)
        got = self.links.get(key)
        if got is not None and got.part is part:
            return got
        async with self._lock:
            got = self.links.get(key)
            if got is not None and got.part is not part:  # the partition was closed and opened again
                await self.links.pop(key).cursor.close()
                got = None
            if got is None:
                cursor = await Cursor.open(self.ledgers, part.ledger, cursor_name(remote))
                got = self.links[key] = PartitionLink(remote, part, cursor)
            return got

    def incoming_meter(self, topic: str, index: int, source: str) -> Meter:
        return self.incoming.setdefault((topic, index, source), Meter())

    def first_unreplicated(self, topic: str, index: int) -> Position | None:
        """The lowest position some remote still needs on this partition (trimming stops there)."""
        firsts = [link.cursor.first_undeleted() for (t, i, _), link in self.links.items()
                  if t == topic and i == index]
        return min(firsts, default=None)

    async def stats(self, topic: str, indexes: list[int]) -> dict[str, dict[str, Any]]:
        """Topic stats' ``replication`` section over the partitions ``indexes`` (open here)."""
        return combine([await self.partition_stats(topic, i) for i in indexes])

    async def partition_stats(self, topic: str, index: int) -> dict[str, dict[str, Any]]:
        """One partition's ``replication`` rows, one per remote cluster it sends to or hears from."""
        out: dict[str, dict[str, Any]] = {}
        remotes = {r for (t, i, r) in (*self.links, *self.incoming) if t == topic and i == index}
        for remote in remotes:
            link = self.links.get((topic, index, remote))
            inc = self.incoming.get((topic, index, remote))
            rate_in, tput_in = inc.rates() if inc else (0.0, 0.0)
            rate_out, tput_out = link.out.rates() if link else (0.0, 0.0)
            if link:
                link.backlog, link.delay_s = await _backlog(link)
            out[remote] = {
                "msgRateIn": rate_in, "msgThroughputIn": tput_in, "msgInCounter": inc.total if inc else 0,
                "msgRateOut": rate_out, "msgThroughputOut": tput_out,
                "msgOutCounter": link.out.total if link else 0,
                "replicationBacklog": link.backlog if link else 0,
                "replicationDelayInSeconds": link.delay_s if link else 0.0,
                "connected": bool(link and link.reaches),
            }
        return out

    async def refresh(self) -> None:
        """Recompute every link's backlog and delay (what the metrics report)."""
        for link in list(self.links.values()):
            link.backlog, link.delay_s = await _backlog(link)

    def metric_values(self) -> dict[tuple[str, str], dict[str, float]]:
        """``(topic, remote) -> {metric suffix: value}`` for the ``pulsar_replication_*`` metrics,
        over the partitions open here (each broker replica reports its own: sum them)."""
        rows: dict[tuple[str, str], list[dict[str, float]]] = {}
        for key in {*self.links, *self.incoming}:
            link, inc = self.links.get(key), self.incoming.get(key)
            rate_in, tput_in = inc.rates() if inc else (0.0, 0.0)
            rate_out, tput_out = link.out.rates() if link else (0.0, 0.0)
            rows.setdefault((key[0], key[2]), []).append({
                "rate_in": rate_in, "throughput_in": tput_in, "rate_out": rate_out,
                "throughput_out": tput_out, "backlog": link.backlog if link else 0,
                "delay_in_seconds": link.delay_s if link else 0.0,
                "connected_count": 1.0 if link and link.reaches else 0.0})
        out: dict[tuple[str, str], dict[str, float]] = {}
        for topic_remote, parts in rows.items():
            summed = {k: sum(p[k] for p in parts) for k in parts[0]}
            summed["delay_in_seconds"] = max(p["delay_in_seconds"] for p in parts)
            summed["connected_count"] = min(p["connected_count"] for p in parts)
            out[topic_remote] = summed
        return out

    async def forget(self, topic: str, index: int) -> None:
        """Drop a partition's links (broker replicas: another broker serves it now, and its
        replication cursors there are the ones the controller's calls move)."""
        for key in [k for k in self.links if k[:2] == (topic, index)]:
            await self.links.pop(key).cursor.close()
        for key in [k for k in self.incoming if k[:2] == (topic, index)]:
            del self.incoming[key]

    async def drop(self, topic: str, remote: str) -> None:
        """Delete the ``pulsar.repl.<remote>`` cursors of the topic's partitions open here: the
        remote is no longer replicated to (a later link starts a new cursor)."""
        async with self._lock:
            for key in [k for k in self.links if k[0] == topic and k[2] == remote]:
                link = self.links.pop(key)
                await link.cursor.close()
                await self.ledgers.delete(cursor_ledger_name(link.part.ledger.name, cursor_name(remote)))

    async def close(self) -> None:
        for link in self.links.values():
            await link.cursor.close()


async def _backlog(link: PartitionLink) -> tuple[int, float]:
    """Entries of the partition not yet replicated (up to maxReadPosition) and the age of the
    oldest, in s.

    The count is the span of entry ids, which may include ids of entries that are
    never sent (aborted messages, markers): Pulsar counts entries too.
    """
    part = link.part
    limit = part.max_read_position()
    first = link.cursor.first_undeleted()
    if limit is None or first > limit:
        return 0, 0.0
    entries = await part.ledger.read(first, 1)
    delay = 0.0
    if entries:
        delay = max(0.0, time.time() - codec.decode_header(entries[0].data).publish_time_ms / 1000)
    return limit.entry_id - first.entry_id + 1, delay


def start_of(part: Partition, cursor: Cursor, after: str | None) -> Position:
    """Where a read for a remote starts: after ``after`` or at the cursor's first undeleted entry."""
    if after:
        try:
            pos = Position.parse(after)
        except ValueError:
            raise MalformedError(f"bad position {after!r}") from None
        return max(_next(part, pos), cursor.first_undeleted())
    return cursor.first_undeleted()
