"""Message ids: ``"{ledger_id}:{entry_id}"`` or ``"{ledger_id}:{entry_id}:{batch_index}"``.

The one parser and formatter of message ids (docs/api.md, "Conventions"): the
broker's ack, nack and end paths, the pending-ack store, the binary acks codec,
the SDK and the demo all go through :meth:`MessageId.parse` (or, on the hot
routes, :func:`parse_many`), so one malformed id gets the same 400
``malformed`` everywhere. ``ledger_id`` and ``entry_id`` are unsigned 64-bit,
``batch_index`` a signed 32-bit index, -1 when the id names a whole entry
(the binary acks' and the pending-ack log's encoding). Only ASCII digits are
numbers: a sign, whitespace (``"L: 1"``), a negative entry id, ``"²"`` or an
empty part is malformed.

This module is pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, NamedTuple

from pydantic import WithJsonSchema

from streamtx.contracts.txnid import MESSAGE_ID_PATTERN
from streamtx.errors import MalformedError

_u64_max = (1 << 64) - 1
_i32_max = (1 << 31) - 1
_new = tuple.__new__


class MessageId(NamedTuple):
    """A message; tuples order the ids of one ledger by position (a whole entry, -1, first)."""

    ledger_id: int
    entry_id: int
    batch_index: int = -1

    def __str__(self) -> str:
        return format_id(self.ledger_id, self.entry_id, self.batch_index)

    @property
    def entry(self) -> tuple[int, int]:
        """The (ledger_id, entry_id) the message lives in."""
        return self.ledger_id, self.entry_id

    @classmethod
    def of(cls, ledger_id: int, entry_id: int, batch_index: int | None = None) -> MessageId:
        """Numbers checked for range (400 ``malformed`` when out of it); None: a whole entry."""
        bi = -1 if batch_index is None else batch_index
        if not (0 <= ledger_id <= _u64_max and 0 <= entry_id <= _u64_max and -1 <= bi <= _i32_max):
            raise MalformedError(f"message id {ledger_id}:{entry_id}:{bi} is out of range")
        return _new(cls, (ledger_id, entry_id, bi))

    @classmethod
    def parse(cls, text: str) -> MessageId:
        """Parse ``ledger:entry[:batch_index]``; MalformedError (400) on anything else."""
        # partition, not split: this runs for every id of every ack and transaction end.
        lid, _, rest = text.partition(":")
        eid, sep, bi = rest.partition(":")
        if not (_is_number(lid, 20) and _is_number(eid, 20) and (not sep or _is_number(bi, 10))):
            raise MalformedError(f"message id {_shown(text)} is not 'ledger:entry[:batch_index]' "
                                 "(unsigned decimals)")
        ledger, entry, index = int(lid), int(eid), (int(bi) if sep else -1)
        if ledger > _u64_max or entry > _u64_max or index > _i32_max:
            raise MalformedError(f"message id {_shown(text)} is out of range")
        return _new(cls, (ledger, entry, index))


#: A message id in a request body's model: documented with its pattern (OpenAPI), checked by
#: :func:`parse_many` in the route (the hot path's one pass, which also checks the ranges).
MessageIdText = Annotated[str, WithJsonSchema({
    "type": "string", "pattern": MESSAGE_ID_PATTERN,  # exactly what MessageId.parse accepts
    "description": "message id 'ledger:entry' or 'ledger:entry:batch_index' (unsigned decimals)"})]


def format_id(ledger_id: int, entry_id: int, batch_index: int | None = None) -> str:
    """The one formatter: ``"ledger:entry"``, or ``"ledger:entry:batch_index"`` (None or -1: none)."""
    if batch_index is None or batch_index < 0:
        return f"{ledger_id}:{entry_id}"
    return f"{ledger_id}:{entry_id}:{batch_index}"


def parse_many(texts: Iterable[str]) -> list[MessageId]:
    """:meth:`MessageId.parse` of each, an entry's ``ledger:entry`` parsed once (the fast path:
    acks and ends list thousands of ids of a few batched entries)."""
    out: list[MessageId] = []
    heads: dict[str, tuple[int, int]] = {}
    for text in texts:
        head, sep, tail = text.rpartition(":")
        hit = heads.get(head) if sep else None
        if hit is not None and _is_number(tail, 10) and (index := int(tail)) <= _i32_max:
            out.append(_new(MessageId, (hit[0], hit[1], index)))
            continue
        mid = MessageId.parse(text)
        if mid.batch_index >= 0:  # then head is "ledger:entry", already checked
            heads[head] = mid.entry
        out.append(mid)
    return out


def _is_number(text: str, digits: int) -> bool:
    # ASCII digits only (str.isdigit accepts '²'; int() accepts ' 1', '+1', '1_0'), and short.
    return 0 < len(text) <= digits and text.isascii() and text.isdigit()


def _shown(text: str) -> str:
    return ascii(text[:80] + ("..." if len(text) > 80 else ""))
