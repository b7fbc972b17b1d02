"""Bounds on what a connection may hold before it delivers a request (issue 21 item 10).

uvicorn's httptools protocol (the parser every service runs: ``STREAMTX_SERVER_HTTP``
auto) puts no limit on a request's head and no deadline on reading one: a 64 MiB
header was read whole (before auth ever ran), and a client that sent half a request
and waited, or connected and sent nothing, held its connection for good (uvicorn's
keep-alive timer starts only after a first response, and every byte restarts it).
:func:`guarded_httptools` is that protocol with:

- the head (request line and headers) at most ``max_header_bytes``, and at most
  ``max_headers`` header lines: else ``431`` with the API's error body, and the
  connection closes (at most one read past the limit is ever held);
- ``head_timeout_s`` to deliver a whole head, counted from the connection's start or
  from the answer to its previous request: an idle connection is closed, one that
  sent part of a head gets ``408`` first;
- ``body_timeout_s`` to deliver the rest of the request once its head is in: else
  the connection closes (the route sees its client leave, as when it disconnects).

Long polls are not affected: a request's reading is over before its handler waits.
:func:`guarded_h11` puts uvicorn's h11 protocol (``STREAMTX_SERVER_HTTP=h11``, or
no httptools installed) under the same limits: h11 holds at most
``max_header_bytes`` of an unfinished head (its ``max_incomplete_event_size``), and
its refusal becomes the same 431 where uvicorn answered a bare 400.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from streamtx.errors import HeadersTooLargeError, RequestTimeoutError, StreamtxError, reply_of

__all__ = ["ConnectionLimits", "guarded_h11", "guarded_httptools"]

_reasons = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


@dataclass(frozen=True)
class ConnectionLimits:
    """What one connection may take (``ServiceSettings``: ``STREAMTX_MAX_HEADER_BYTES`` and the rest)."""

    max_header_bytes: int = 32 << 10
    max_headers: int = 100
    head_timeout_s: float = 10.0
    body_timeout_s: float = 30.0


class _Refused(Exception):
    """Raised from a parser callback to stop parsing a request that was just refused."""


def raw_error(exc: StreamtxError) -> bytes:
    """A whole HTTP/1.1 answer for ``exc`` written straight to the socket (before any app ran)."""
    status, body = reply_of(exc)
    return b"".join([
        b"HTTP/1.1 %d %s\r\n" % (status, _reasons.get(status, b"Error")),
        b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body),
        body,
    ])


class _Limits(asyncio.Protocol):
    """What both guarded protocols share: the deadline timer, the checks of a whole head, and
    the refusal written straight to the socket. First in their bases: ``super()`` here is
    uvicorn's protocol."""

    limits = ConnectionLimits()
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def _guard_init(self) -> None:
        self._in_head = True
        self._head_bytes = 0
        self._deadline: asyncio.TimerHandle | None = None
        self._refused = False

    # --- deadlines ----------------------------------------------------------------

    def _arm(self, seconds: float, head: bool) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired, head)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, head: bool) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if head and self._head_bytes:
            self._refuse(RequestTimeoutError(
                f"the request's head did not arrive within {self.limits.head_timeout_s:g} s"))
        else:  # nothing asked (idle), or a body too slow: a route may be reading it, just close
            self.transport.close()

    def _too_large(self) -> HeadersTooLargeError:
        limit = self.limits.max_header_bytes
        return HeadersTooLargeError(f"the request's head exceeds {limit} bytes (STREAMTX_MAX_HEADER_BYTES)")

    def _refuse(self, exc: StreamtxError) -> None:
        self._refused = True
        self._disarm()
        self.transport.write(raw_error(exc))
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.limits.head_timeout_s, head=True)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _answered(self) -> None:
        if not self.transport.is_closing() and self._deadline is None and self._in_head:
            self._arm(self.limits.head_timeout_s, head=True)  # the next request's head, from now

    def _head_refusal(self, target: bytes, headers: list[tuple[bytes, bytes]]) -> StreamtxError | None:
        """Why a whole head is refused (a head that arrived in one read with its body was not
        caught by the count of reads), or None."""
        size = len(target) + sum(len(name) + len(value) + 4 for name, value in headers)
        if size > self.limits.max_header_bytes:
            return self._too_large()
        if len(headers) > self.limits.max_headers:
            return HeadersTooLargeError(f"the request has {len(headers)} header lines, more than "
                                        f"{self.limits.max_headers} (STREAMTX_MAX_HEADERS)")
        return None


class _Guarded(_Limits, HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guard_init()

    # --- uvicorn's protocol ---------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._in_head:
            self._head_bytes += len(data)
        try:
            super().data_received(data)
        except _Refused:
            return
        if self._in_head and not self._refused and self._head_bytes > self.limits.max_header_bytes:
            self._refuse(self._too_large())

    def send_400_response(self, msg: str) -> None:
        if not self._refused:  # a refusal raised from a callback reaches uvicorn as a parser error
            super().send_400_response(msg)

    def on_headers_complete(self) -> None:
        self._in_head = False
        refusal = self._head_refusal(self.url, self.headers)
        if refusal is not None:
            self._refuse(refusal)
            raise _Refused
        self._arm(self.limits.body_timeout_s, head=False)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        self._in_head, self._head_bytes = True, 0
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._answered()


def guarded_httptools(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol under ``limits`` (pass it as ``uvicorn.Config(http=...)``)."""
    return type("GuardedHttpToolsProtocol", (_Guarded,), {"limits": limits})


class _WatchedConnection(h11.Connection):
    """h11's connection, telling its protocol when a head is whole and when a request is."""

    def __init__(self, protocol: _GuardedH11, max_head_bytes: int) -> None:
        super().__init__(h11.SERVER, max_head_bytes)
        self._protocol = protocol

    def next_event(self) -> Any:
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as exc:
            if exc.error_status_hint == 431:  # its buffer of an unfinished head is full
                self._protocol._refuse(self._protocol._too_large())
            raise
        if isinstance(event, h11.Request):
            self._protocol._head_done(event)
        elif isinstance(event, h11.EndOfMessage):
            self._protocol._message_done()
        return event


class _GuardedH11(_Limits, H11Protocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guard_init()
        # h11 itself bounds what it buffers of an unfinished head: no count of reads needed.
        self.conn = _WatchedConnection(self, self.limits.max_header_bytes)

    def _head_done(self, event: h11.Request) -> None:
        self._in_head = False
        refusal = self._head_refusal(event.target, list(event.headers))
        if refusal is not None:
            self._refuse(refusal)
            raise h11.RemoteProtocolError("refused")  # uvicorn stops handling; its 400 is muted
        self._arm(self.limits.body_timeout_s, head=False)

    def _message_done(self) -> None:
        self._disarm()
        self._in_head, self._head_bytes = True, 0

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._in_head:
            self._head_bytes += len(data)  # only "is a head under way" counts here (a 408, not a close)
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        if not self._refused:
            super().send_400_response(msg)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._answered()


def guarded_h11(limits: ConnectionLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol under ``limits`` (pass it as ``uvicorn.Config(http=...)``)."""
    return type("GuardedH11Protocol", (_GuardedH11,), {"limits": limits})
