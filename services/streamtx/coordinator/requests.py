"""The mailbox request being served, for the records it appends (FORWARDED, ``records.py``).

:func:`~streamtx.coordinator.forwarding.serve` sets :data:`current` while the
owner plays a request from its mailbox; the coordinator wraps every record it
appends meanwhile (and in the tasks the request starts, which inherit the
context) with the request's id.
"""

from __future__ import annotations

from contextvars import ContextVar

from streamtx.ownership.mailbox import REQUEST_ID

__all__ = ["current", "parse"]

current: ContextVar[bytes | None] = ContextVar("streamtx_request_id", default=None)


def parse(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The 16-byte request id a mailbox call carries (None if it has none, or a bad one)."""
    for name, value in headers:
        if name == REQUEST_ID:
            try:
                raw = bytes.fromhex(value.decode("latin-1"))
            except ValueError:
                return None
            return raw if len(raw) == 16 else None
    return None
