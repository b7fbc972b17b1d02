"""One partition of one topic towards one remote cluster: read, send, then move the cursor.

The loop: read the partition's local entries after the last position sent (from
the broker's durable cursor ``pulsar.repl.<remote>`` after a restart), write
them to the remote's broker in that order, then move the cursor over them
(while the next batch goes: one move in flight at a time). A
crash between write and cursor move sends the entries again; the remote
partition drops them (its producer ``pulsar.repl.<source>`` has sequence =
source entry id), so each entry lands there exactly once and in source order.
The cursor is opened first, before the remote is ever reached, so a remote
down from the start holds back trims and shows its backlog too. While the
remote is down the loop retries with backoff and the cursor stays: the
backlog grows and nothing is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from streamtx.contracts.replication import (
    ReplicatedEntry,
    ReplicatedTopic,
    ReplicationEntries,
    ReplicationRead,
    ReplicationWrite,
    ReplicatorAck,
    ReplicatorCursor,
)
from streamtx.errors import NotFoundError, StreamtxError
from streamtx.replication.settings import ReplicationSettings
from streamtx.transport import HttpClient

log = logging.getLogger(__name__)

#: The remote's broker client for a cluster name (raises while undiscoverable).
RemoteOf = Callable[[str], Awaitable[HttpClient]]
#: Called with each batch read (the snapshot logic watches markers pass).
Observer = Callable[[list[dict[str, Any]]], None]


class PartitionReplicator:
    """Copies one partition's local entries to one remote cluster, forever."""

    def __init__(self, *, local: HttpClient, remote_of: RemoteOf, local_cluster: str, remote: str,
                 topic: str, partition: int, partitions: int, settings: ReplicationSettings) -> None:
        self.local = local
        self.remote_of = remote_of
        self.local_cluster = local_cluster
        self.remote = remote
        self.topic = topic
        self.partition = partition
        self.partitions = partitions
        self.settings = settings
        self.connected = False
        self.sent_messages = 0
        self._after: str | None = None  # last position sent; None: ask the cursor
        self._acking: asyncio.Task[None] | None = None  # the cursor move in flight
        self._remote: tuple[HttpClient, HttpClient] | None = None  # (the cluster's client, this log's)

    async def run(self) -> None:
        delay = 0.05
        ready = False
        while True:
            try:
                if not ready:
                    # The cursor first, reached or not: it holds back trims and shows the
                    # backlog from the start. Again on every retry: a restarted broker
                    # forgets the cursors it has open until someone asks for them.
                    await self._open_cursor()
                    # The topic exists there before its first message is due.
                    await self._ensure_remote_topic(await self._remote_client())
                    self.connected = ready = True
                await self.step()
                delay = 0.05
            except asyncio.CancelledError:
                if self._acking is not None:
                    self._acking.cancel()
                raise
            except StreamtxError as exc:
                if not ready:
                    self.connected = False
                with contextlib.suppress(StreamtxError):
                    await self._acked()
                self._after = None  # resume from the durable cursor; the remote drops repeats
                log.info("replicator %s[%d] -> %s: %s; retrying in %.2fs", self.topic, self.partition,
                         self.remote, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.retry_max_s)

    async def _open_cursor(self) -> None:
        """Open ``pulsar.repl.<remote>`` on the local broker; reads nothing, moves nothing."""
        await self.local.request("POST", "/v1/replication/cursor", json=ReplicatorCursor(
            topic=self.topic, partition=self.partition, remote=self.remote, connected=False))

    async def step(self) -> None:
        got = await self.local.request("POST", "/v1/replication/read", json=ReplicationRead(
            topic=self.topic, partition=self.partition, remote=self.remote, after=self._after,
            max_entries=self.settings.read_max_entries, wait_ms=self.settings.read_wait_ms,
            connected=self.connected,
        ))
        read = ReplicationEntries.model_validate(got)
        last, entries = read.last, read.entries
        if last is None:
            return
        if entries:
            try:
                await self._send(entries)
            except StreamtxError:
                self.connected = False
                raise
            self.connected = True
        messages = sum(len(e.messages or ()) for e in entries)
        size = sum(len(m.value) * 3 // 4 for e in entries for m in e.messages or ())
        # The cursor moves while the next batch is read and sent: a wait for its fsync per
        # batch was a third of every hop (markers of a snapshot make four hops). One move
        # in flight at a time, so the cursor moves in order; a failed one surfaces here.
        await self._acked()
        self._acking = asyncio.create_task(self._ack(last, messages, size))
        self._after = last

    async def _ack(self, last: str, messages: int, size: int) -> None:
        await self.local.request("POST", "/v1/replication/ack", json=ReplicatorAck(
            topic=self.topic, partition=self.partition, remote=self.remote, position=last,
            messages=messages, bytes=size,
        ))
        self.sent_messages += messages

    async def _acked(self) -> None:
        """Wait for the cursor move in flight (its error raised)."""
        acking, self._acking = self._acking, None
        if acking is not None:
            await acking

    async def _remote_client(self) -> HttpClient:
        """The remote cluster's broker client, as one for this partition: the remote's broker
        replicas may split the topic too, and this one remembers which owns the partition."""
        cluster = await self.remote_of(self.remote)
        if self._remote is None or self._remote[0] is not cluster:
            self._remote = (cluster, cluster.for_log())
        return self._remote[1]

    async def _send(self, entries: list[ReplicatedEntry]) -> None:
        remote = await self._remote_client()
        # The entries were validated as read: not a second time.
        body = ReplicationWrite.model_construct(topic=self.topic, partition=self.partition,
                                                source=self.local_cluster, entries=entries)
        try:
            await remote.request("POST", "/v1/replication/write", json=body)
        except NotFoundError:  # deleted there meanwhile, or a remote that lost its data
            await self._ensure_remote_topic(remote)
            await remote.request("POST", "/v1/replication/write", json=body)

    async def _ensure_remote_topic(self, remote: HttpClient) -> None:
        """Create the topic there as it is here, if missing (Pulsar auto-creates it too); idempotent."""
        await remote.request("POST", "/v1/replication/topics",
                             json=ReplicatedTopic(topic=self.topic, partitions=self.partitions))
