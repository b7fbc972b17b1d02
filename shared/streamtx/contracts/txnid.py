"""Transaction ids: 128 bits, the coordinator id in the top 16 bits.

Layout (docs/api.md, docs/background.md)::

    most  (64 bits) = coordinator_id (16 bits) | counter bits 64..111 (48 bits)
    least (64 bits) = counter bits 0..63

so a coordinator's counter has 112 bits and, in practice, ``least`` alone is
the sequence number (Pulsar's ``leastSigBits``). In JSON and paths the id is
``"{most}:{least}"``, two unsigned 64-bit decimals.

This is the one parser and formatter of transaction ids: the coordinator's
paths, the broker's produce/ack/end bodies, the pending-ack store's bodies, the
SDK and the CLI all go through :meth:`TxnId.parse` (or :data:`TxnIdField` in a
model), so one malformed id gets the same 400 everywhere.

This module is pure: no I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, NamedTuple, cast

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

from streamtx.errors import MalformedError

max_coordinator_id = (1 << 16) - 1
_u64_max = (1 << 64) - 1
_counter_max = (1 << 112) - 1


class TxnId(NamedTuple):
    """A transaction id; tuples order ids by (most, least), i.e. by coordinator then counter."""

    most: int
    least: int

    @classmethod
    def of(cls, coordinator_id: int, counter: int) -> TxnId:
        """The id of ``counter`` on coordinator ``coordinator_id``."""
        if not 0 <= coordinator_id <= max_coordinator_id:
            raise ValueError(f"coordinator id {coordinator_id} is not in 0..{max_coordinator_id}")
        if not 0 <= counter <= _counter_max:
            raise ValueError(f"counter {counter} does not fit 112 bits")
        return cls((coordinator_id << 48) | (counter >> 64), counter & _u64_max)

    @classmethod
    def parse(cls, text: str) -> TxnId:
        """Parse ``"{most}:{least}"``; MalformedError (400) on anything else."""
        most_s, sep, least_s = text.partition(":")
        if not (sep and _is_u64_text(most_s) and _is_u64_text(least_s)):
            raise MalformedError(f"transaction id {text[:80]!r} is not '<most>:<least>'")
        return cls.from_parts(int(most_s), int(least_s))

    @classmethod
    def from_parts(cls, most: int, least: int) -> TxnId:
        """Validate two unsigned 64-bit halves; MalformedError (400) when out of range."""
        if not (0 <= most <= _u64_max and 0 <= least <= _u64_max):
            raise MalformedError("transaction id halves must be unsigned 64-bit integers")
        return cls(most, least)

    @property
    def coordinator_id(self) -> int:
        return self.most >> 48

    @property
    def counter(self) -> int:
        return ((self.most & 0xFFFF_FFFF_FFFF) << 64) | self.least

    def __str__(self) -> str:
        return f"{self.most}:{self.least}"


#: ``(most, least)`` -> TxnId with no checks, at C speed: for pairs decoded from
#: our own records (a snapshot holds a million ids), never for client input.
from_pair = cast(Callable[[tuple[int, int]], TxnId], functools.partial(tuple.__new__, TxnId))


def _validate(value: Any) -> TxnId:
    if isinstance(value, TxnId):
        return value
    if not isinstance(value, str):
        raise ValueError("a transaction id is a string '<most>:<least>'")
    try:
        return TxnId.parse(value)
    except MalformedError as exc:  # pydantic reports ValueError as a validation error (400)
        raise ValueError(exc.message) from None


def decimal_upto(top: int) -> str:
    """A regex of the decimals 0..``top`` as the parsers read them: ASCII digits (leading zeros
    allowed, as ``int`` allows them), never more than ``top`` has, none larger."""
    digits = str(top)
    alts = [f"[0-9]{{1,{len(digits) - 1}}}", f"0[0-9]{{{len(digits) - 1}}}", digits]
    for i, digit in enumerate(digits):
        if digit != "0" and (i or digit != "1"):  # this digit smaller, the rest anything
            low = "1" if i == 0 else "0"
            alts.append(f"{digits[:i]}[{low}-{int(digit) - 1}][0-9]{{{len(digits) - i - 1}}}")
    return "(?:" + "|".join(alts) + ")"


_u64 = decimal_upto(_u64_max)

#: The schema pattern of a transaction id (OpenAPI): exactly what :meth:`TxnId.parse` accepts.
TXN_ID_PATTERN = f"^{_u64}:{_u64}$"
#: One unsigned 64-bit decimal (a half of a transaction id in a path).
U64_PATTERN = f"^{_u64}$"
#: A message id ``"{ledger}:{entry}[:{batch_index}]"`` (docs/api.md): exactly what
#: ``MessageId.parse`` accepts (and ``Position.parse``, which takes a message id's entry).
MESSAGE_ID_PATTERN = f"^{_u64}:{_u64}(?::{decimal_upto((1 << 31) - 1)})?$"


def _documented(pattern: str, what: str) -> Any:
    # Documented only: the one parser of these ids (MessageId.parse) checks them where they are used.
    return Annotated[str, WithJsonSchema({"type": "string", "pattern": pattern, "description": what})]


#: A ledger position in a request body (a message id's entry; its batch index, if any, ignored).
PositionText = _documented(MESSAGE_ID_PATTERN, "ledger position '<ledger>:<entry>'")


#: A model field holding a transaction id: ``"{most}:{least}"`` on the wire, a
#: :class:`TxnId` in Python, validated by :meth:`TxnId.parse`.
TxnIdField = Annotated[
    TxnId,
    BeforeValidator(_validate),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "pattern": TXN_ID_PATTERN,
                    "description": "transaction id '<most>:<least>', two unsigned 64-bit decimals"}),
]


def _is_u64_text(text: str) -> bool:
    # ASCII digits only (str.isdigit accepts '²'), and short enough that int() is cheap.
    return 0 < len(text) <= 20 and text.isascii() and text.isdigit()
