"""Which subscriptions a pending-ack replica owns: slots, and each slot's index of its logs.

Subscriptions are created on demand, so they are not leased one by one: each
hashes into one of ``pendingack_slots`` slots (:func:`~streamtx.ownership.slot_of`
of ``"<topic> <subscription>"``) and the slots are the leased items. The slot
count must be the same on every replica (changing it moves subscriptions between
slots: stop every replica first).

The owner of a slot must fence the logs of *all* its subscriptions when it takes
the slot over, not only those it is asked about: a paused old owner that wakes
must find every log of the slot fenced. So each slot keeps an index ledger,
``pendingack-slots/<slot>``, listing its subscriptions; taking the slot opens
the index as writer (fencing the old owner's index, so it can create no new
subscription in the slot), reads it, then opens every listed log as writer
(fencing it) and replays it. A subscription enters its slot's index before its
log is first opened. A subscription's slot is its topic's: its partitions'
names hash as the topic's name (before, ``x-partition-N`` hashed apart: an
upgrade moves those subscriptions between slots, so stop every replica first).

Index entry (one record per entry, appended once per subscription)::

    {"t": "<topic>", "s": "<subscription>"}     (JSON, UTF-8)

An entry that does not decode is skipped with a warning (it names nothing the
slot could fence). Logs from before the index existed join it on first use.
"""

from __future__ import annotations

import asyncio
import logging

import orjson

from streamtx.ledger import Ledger, LedgerFactory, Position
from streamtx.names import topic_of
from streamtx.ownership import slot_of

__all__ = ["SlotIndex", "decode_entry", "encode_entry", "index_name", "subscription_slot"]

log = logging.getLogger(__name__)

Key = tuple[str, str]

_read_entries = 1000


def subscription_slot(topic: str, subscription: str, slots: int) -> int:
    """The slot of a subscription named under its topic's name or a partition's: the topic's
    (one store serves every name of it, issue 32 defect 1)."""
    return slot_of(f"{topic_of(topic)} {subscription}", slots)


def index_name(slot: int) -> str:
    return f"pendingack-slots/{slot}"


def encode_entry(key: Key) -> bytes:
    return orjson.dumps({"t": key[0], "s": key[1]})


def decode_entry(data: bytes) -> Key | None:
    try:
        raw = orjson.loads(data)
        return str(raw["t"]), str(raw["s"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None


class SlotIndex:
    """The subscriptions of one slot, from its index ledger (opened as writer)."""

    def __init__(self, slot: int, ledger: Ledger, keys: list[Key]) -> None:
        self.slot = slot
        self.ledger = ledger
        self.keys = keys
        self._known = set(keys)
        self._adding: dict[Key, asyncio.Future[Position]] = {}

    @classmethod
    async def open(cls, ledgers: LedgerFactory, slot: int) -> SlotIndex:
        """Open the index as writer (the fence) and read every subscription it lists."""
        ledger = await ledgers.open(index_name(slot), writer=True)
        keys: list[Key] = []
        start: Position | None = None
        try:
            while entries := await ledger.read(start, _read_entries):
                for entry in entries:
                    key = decode_entry(entry.data)
                    if key is None:
                        log.warning("pending-ack slot %d: index entry %s does not decode", slot,
                                    entry.position)
                    elif key not in keys:
                        keys.append(key)
                last = entries[-1].position
                start = Position(last.ledger_id, last.entry_id + 1)
        except BaseException:
            await ledger.close()
            raise
        return cls(slot, ledger, keys)

    async def add(self, key: Key) -> None:
        """List ``key`` durably (once); ``FencedError`` when another replica took the slot."""
        if key in self._known:
            return
        pending = self._adding.get(key)
        if pending is None:
            pending = self._adding[key] = asyncio.ensure_future(self.ledger.append(encode_entry(key)))
            pending.add_done_callback(lambda _: self._adding.pop(key, None))
        await asyncio.shield(pending)
        if key not in self._known:
            self._known.add(key)
            self.keys.append(key)

    async def close(self) -> None:
        await self.ledger.close()
