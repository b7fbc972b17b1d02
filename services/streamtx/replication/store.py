"""The controller's durable state: its policy records in the ledger ``replication/<cluster>/policies``.

One JSON record per entry (see :mod:`streamtx.replication.policies`), replayed on start.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from streamtx.ledger import Ledger, LedgerFactory, Position
from streamtx.replication.policies import Policies


class PolicyStore:
    """Appends policy records and keeps the :class:`Policies` they add up to."""

    def __init__(self, ledger: Ledger, policies: Policies) -> None:
        self._ledger = ledger
        self.policies = policies
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, ledgers: LedgerFactory, cluster: str) -> PolicyStore:
        ledger = await ledgers.open(f"replication/{cluster}/policies")
        policies = Policies(cluster)
        start: Position | None = None
        while entries := await ledger.read(start, 1000):
            for e in entries:
                policies.apply(orjson.loads(e.data))
            last = entries[-1].position
            start = Position(last.ledger_id, ledger.next_entry_id(last.entry_id))
        return cls(ledger, policies)

    async def record(self, record: dict[str, Any]) -> None:
        """Durable first, then applied: an acknowledged change survives a crash."""
        async with self._lock:
            await self._ledger.append(orjson.dumps(record))
            self.policies.apply(record)

    async def close(self) -> None:
        await self._ledger.close()
