"""Request bodies capped before they are read whole: 413 with the limit in the message.

Every service buffers a request's body before parsing it (FastAPI's ``request.body()``
and the fast lane alike), so without a cap one client could make a service hold,
say, 256 MiB and then parse it. :class:`BodyLimit` is the outermost ASGI layer:

- a ``Content-Length`` above the limit is answered 413 at once, before a byte of
  the body is read;
- a body without a length (chunked) is counted as it arrives, and the read that
  crosses the limit raises :class:`BodyTooLarge`, which both the fast lane and
  FastAPI's error handler answer with 413. At most one chunk past the limit is
  ever held.

The limit is each service's ``STREAMTX_MAX_BODY_BYTES`` (:class:`ServiceSettings`).
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from streamtx.service.errors import error_response


class BodyTooLarge(HTTPException):
    """The request body exceeds the service's limit (413)."""

    def __init__(self, limit: int) -> None:
        # An HTTPException, not a StreamtxError: FastAPI turns any other exception
        # raised while it reads a body into a 400 "error parsing the body".
        super().__init__(413, too_large_message(limit))


def too_large_message(limit: int) -> str:
    return f"request body exceeds the limit of {limit} bytes (STREAMTX_MAX_BODY_BYTES)"


class BodyLimit:
    """ASGI middleware: refuse bodies larger than ``max_bytes`` with 413."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await error_response(413, "too_large", too_large_message(limit))(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, counted, send)


def _content_length(scope: Scope) -> int | None:
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
