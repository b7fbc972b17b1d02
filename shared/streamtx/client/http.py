"""The SDK's HTTP layer: one keep-alive httpx client per service, errors as streamtx errors.

Only calls that are safe to repeat are retried (reads, the coordinator's
idempotent calls, a named producer's sends, acks); an unnamed producer's send
is never retried, since the broker could not drop the duplicate.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx

from streamtx.errors import StreamtxError, UnavailableError
from streamtx.redirect import send_to_owner
from streamtx.service.http import error_from_response

_attempts = 4
_first_backoff_s = 0.05


class AuthError(StreamtxError):
    """The token is missing (401) or not allowed here (403)."""

    code, status = "unauthorized", 401


class Endpoint:
    """Calls to one service's base URL."""

    def __init__(self, client: httpx.AsyncClient, base_url: str) -> None:
        self._client = client
        self.base_url = base_url.rstrip("/")

    async def call(
        self, method: str, path: str, *, json: Any = None, params: Any = None, idempotent: bool = True,
    ) -> Any:
        """Send; return the decoded JSON body, or raise the error the response stands for."""
        response = await self._send(method, path, {"json": json, "params": params}, idempotent)
        return response.json() if response.content else None

    async def call_bytes(
        self, method: str, path: str, *, content: bytes | None = None, content_type: str | None = None,
        accept: str | None = None, params: Any = None, idempotent: bool = True,
    ) -> tuple[str, bytes]:
        """Send a raw body (the binary batch format); the answer's content type and bytes."""
        headers = {}
        if content_type is not None:
            headers["content-type"] = content_type
        if accept is not None:
            headers["accept"] = accept
        response = await self._send(method, path, {"content": content, "params": params, "headers": headers},
                                    idempotent)
        return response.headers.get("content-type", ""), response.content

    async def _send(self, method: str, path: str, kw: dict[str, Any], idempotent: bool) -> httpx.Response:
        delay = _first_backoff_s
        attempts = _attempts if idempotent else 1
        for attempt in range(attempts):
            try:
                response = await send_to_owner(self._client, method, self.base_url + path, **kw)
            except httpx.HTTPError as exc:
                error: StreamtxError = UnavailableError(f"{method} {path}: {exc!r}")
            else:
                if response.status_code < 400:
                    return response
                error = _error(response)
                if not error.retriable:
                    raise error
            if attempt == attempts - 1:
                raise error
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay *= 2
        raise AssertionError("unreachable")


def _error(response: httpx.Response) -> StreamtxError:
    if response.status_code in (401, 403):
        err = AuthError(f"{response.request.method} {response.request.url.path}: {response.text[:200]}")
        err.status = response.status_code
        return err
    return error_from_response(response)
