"""Transaction ids: 128 bits, the coordinator id in the top 16 bits.

Layout (docs/api.md, docs/background.md)::

    most  (64 bits) = coordinator_id (16 bits) | counter bits 64..111 (48 bits)
    least (64 bits) = counter bits 0..63

so a coordinator's counter has 112 bits and, in practice, ``least`` alone is
the sequence number (Pulsar's ``leastSigBits``). In JSON and paths the id is
``"{most}:{least}"``, two unsigned 64-bit decimals.

This module is pure: no I/O.
"""

from __future__ import annotations

from typing import NamedTuple

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


def _is_u64_text(text: str) -> bool:
    # ASCII digits only (str.isdigit accepts '²'), and short enough that int() is cheap.
    return 0 < len(text) <= 20 and text.isascii() and text.isdigit()
