"""Calling an ASGI app in process, and reading a request off the wire whole.

The coordinator's workers hand each other requests through Redis
(:mod:`streamtx.ownership.mailbox`): the receiving worker reads the request whole
(:func:`read_body`), the owning worker plays it into its own app
(:func:`call_app`) as if a client had sent it, and the answer travels back as
``(status, headers, body)`` (:func:`send_answer`). No socket, no HTTP parsing:
the app's whole stack (body limit, auth, fast lane, error handlers) serves it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["Answer", "Call", "call_app", "read_body", "send_answer"]

Headers = list[tuple[bytes, bytes]]

# Hop-by-hop headers and the framing the receiving server redoes itself.
_dropped = {b"host", b"content-length", b"transfer-encoding", b"connection", b"keep-alive"}


@dataclass(slots=True)
class Call:
    """One HTTP request, whole."""

    method: str
    path: str
    query: bytes = b""
    headers: Headers = field(default_factory=list)
    body: bytes = b""

    @classmethod
    def of(cls, scope: Scope, body: bytes) -> Call:
        headers = [(k, v) for k, v in scope.get("headers", ()) if k.lower() not in _dropped]
        return cls(scope["method"], scope["path"], scope.get("query_string", b""), headers, body)


@dataclass(slots=True)
class Answer:
    """One HTTP response, whole."""

    status: int
    headers: Headers
    body: bytes


async def read_body(receive: Receive) -> bytes:
    """The request's body (a body limit in front of the app bounds it)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def call_app(app: ASGIApp, call: Call, *, extra: dict[str, object] | None = None) -> Answer:
    """Serve ``call`` with ``app``; ``extra`` goes into the scope (a marker the app's layers can read)."""
    scope: Scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": call.method, "scheme": "http", "path": call.path, "raw_path": call.path.encode(),
        "root_path": "", "query_string": call.query, "client": None, "server": None,
        "headers": [*call.headers, (b"content-length", str(len(call.body)).encode())],
        **(extra or {}),
    }
    sent_body = False
    done = asyncio.Event()

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": call.body, "more_body": False}
        await done.wait()  # the "client" stays until the answer is complete
        return {"type": "http.disconnect"}

    status, headers, chunks = 500, [], []

    async def send(message: Message) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status = message["status"]
            headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() not in _dropped]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    try:
        await app(scope, receive, send)
    finally:
        done.set()
    return Answer(status, headers, b"".join(chunks))


async def send_answer(send: Send, answer: Answer) -> None:
    """Send ``answer`` as the response to the request being served."""
    headers = [*answer.headers, (b"content-length", str(len(answer.body)).encode())]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})
