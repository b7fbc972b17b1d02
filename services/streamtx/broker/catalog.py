"""What topics and subscriptions exist: the registry ledger ``broker/<cluster>/topics``.

Each entry is one JSON record, replayed in order::

    {"kind": "topic", "topic": "persistent://t/n/x", "partitions": N}
    {"kind": "subscription", "topic", "subscription", "type", "initial_position"}
    {"kind": "subscription_replicated", "topic", "subscription", "replicated": bool}   (PIP-33)
    {"kind": "replication_cursor", "topic", "remote"}   (a partition of it has ``pulsar.repl.<remote>``)
    {"kind": "replication_cursor_removed", "topic", "remote"}   (the remote left its policy: cursors go)
    {"kind": "subscription_removed", "topic", "subscription"}   (unsubscribed: no owner reopens it)

One broker alone holds the ledger as its only writer. Broker replicas
(``STREAMTX_REDIS_URL``) all read it, and each writes it only to create a topic or
a subscription: a replica opens it as writer for that, which fences the others'
handles, so a replica whose append was fenced reopens it and appends again (a
fenced append never lands, so nothing is written twice). Creations are rare admin
calls, so the fences cost nothing that matters; every replica catches up with the
others' records at each ownership tick (:meth:`Catalog.refresh`).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from streamtx.errors import FencedError
from streamtx.ledger import Ledger, LedgerFactory, Position

__all__ = ["Catalog", "SubRecord", "TopicRecord"]

_reopen_attempts = 5


@dataclass(slots=True)
class SubRecord:
    """A subscription as the registry knows it."""

    type: str
    initial_position: str
    replicated: bool = False


@dataclass(slots=True)
class TopicRecord:
    partitions: int
    subscriptions: dict[str, SubRecord] = field(default_factory=dict)
    #: Remote clusters the topic replicates to: whoever opens one of its partitions opens
    #: their ``pulsar.repl.<remote>`` cursors too, so they hold back trims from the start.
    remotes: set[str] = field(default_factory=set)


class Catalog:
    """The registry's records folded into topics and their subscriptions."""

    def __init__(self, ledgers: LedgerFactory, cluster: str, *, shared: bool) -> None:
        self._ledgers = ledgers
        self._name = f"broker/{cluster}/topics"
        self._shared = shared
        self._ledger: Ledger | None = None
        self._next: Position | None = None  # where the next unread record starts
        self._lock = asyncio.Lock()
        self.topics: dict[str, TopicRecord] = {}
        self.reopens = 0  # times another replica's fence made this one reopen the registry
        self._unseen: list[dict[str, Any]] = []  # read by append, not yet returned by refresh

    async def open(self) -> list[dict[str, Any]]:
        """Open the registry and replay it; the records, in order (the broker opens what they name)."""
        self._ledger = await self._ledgers.open(self._name)
        return await self._read_new()

    async def refresh(self) -> list[dict[str, Any]]:
        """The records other replicas appended since the last read."""
        assert self._ledger is not None
        async with self._lock:
            await self._ledger.refresh()
            new = await self._read_new()
            out, self._unseen = [*self._unseen, *new], []
            return out

    async def _read_new(self) -> list[dict[str, Any]]:
        assert self._ledger is not None
        out: list[dict[str, Any]] = []
        while entries := await self._ledger.read(self._next, 1000):
            for e in entries:
                record = json.loads(e.data)
                self._apply(record)
                out.append(record)
            last = entries[-1].position
            self._next = last._replace(entry_id=self._ledger.next_entry_id(last.entry_id))
        return out

    async def append(self, record: dict[str, Any]) -> None:
        """Make ``record`` durable and fold it in (replicas: reopening the registry if fenced)."""
        assert self._ledger is not None
        data = json.dumps(record, separators=(",", ":")).encode()
        for attempt in range(_reopen_attempts):
            try:
                await self._ledger.append(data)
                break
            except FencedError:
                if not self._shared or attempt == _reopen_attempts - 1:
                    raise
                async with self._lock:  # another replica created something: take the pen back
                    await self._ledger.close()
                    self._ledger = await self._ledgers.open(self._name)
                    self.reopens += 1
        if not self._shared:
            self._apply(record)
            return
        # Folded in log order, with what other replicas appended before it: two replicas
        # creating one topic with different partition counts all keep the first record.
        async with self._lock:
            await self._ledger.refresh()
            self._unseen += await self._read_new()

    def _apply(self, r: dict[str, Any]) -> None:
        kind = r["kind"]
        if kind == "topic":
            self.topics.setdefault(r["topic"], TopicRecord(int(r["partitions"])))
            return
        topic = self.topics.get(r["topic"])
        if topic is None:
            return
        if kind == "subscription":
            sub = topic.subscriptions.get(r["subscription"])
            if sub is None:
                topic.subscriptions[r["subscription"]] = SubRecord(r["type"], r["initial_position"])
            else:
                sub.type = r["type"]
        elif kind == "subscription_replicated" and (sub := topic.subscriptions.get(r["subscription"])):
            sub.replicated = bool(r["replicated"])
        elif kind == "replication_cursor":
            topic.remotes.add(r["remote"])
        elif kind == "replication_cursor_removed":
            topic.remotes.discard(r["remote"])
        elif kind == "subscription_removed":
            topic.subscriptions.pop(r["subscription"], None)

    async def close(self) -> None:
        if self._ledger is not None:
            await self._ledger.close()
