"""Calls between services: one keep-alive httpx client, retries with backoff.

Every inter-service call in streamtx is idempotent, so retrying after a timeout
or a 503 is always safe; 4xx answers are final and raised as streamtx errors.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx
import orjson

from streamtx.errors import (
    ConflictError,
    MalformedError,
    NotFoundError,
    StreamtxError,
    TooLargeError,
    TooManyRequestsError,
    UnavailableError,
)
from streamtx.redirect import send_to_owner

_json_headers = {"content-type": "application/json"}
_by_status: dict[int, type[StreamtxError]] = {
    400: MalformedError, 404: NotFoundError, 409: ConflictError, 413: TooLargeError,
    429: TooManyRequestsError,
}


def error_from_response(response: httpx.Response) -> StreamtxError:
    """The streamtx error an error response stands for."""
    code: object = None
    try:
        body = response.json()
        code = body.get("error")
        message = f"{code}: {body.get('message')}"
    except (ValueError, AttributeError):
        message = response.text[:200]
    cls = _by_status.get(response.status_code, UnavailableError)
    err = cls(f"{response.request.method} {response.request.url.path}: {message}")
    if isinstance(code, str) and code:
        err.code = code  # the peer's own code (a 409 may be "conflict" or "fenced")
    return err


class ServiceClient:
    """An httpx client for one peer service with bounded, jittered retries."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 10.0,
        attempts: int = 5,
        backoff_s: float = 0.05,
        max_backoff_s: float = 2.0,
        token: str | None = None,
    ) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), timeout=timeout_s, headers=headers,
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=100),
        )
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s

    async def request(
        self, method: str, path: str, *, json: Any = None, params: Any = None,
        attempts: int | None = None,
    ) -> Any:
        """Send, retrying transport errors and 5xx; return the decoded JSON body."""
        tries = attempts or self.attempts
        delay = self.backoff_s
        # orjson, not httpx's stdlib json: ack and end bodies carry thousands of ids.
        content = None if json is None else orjson.dumps(json)
        headers = None if json is None else _json_headers
        for attempt in range(tries):
            try:
                response = await send_to_owner(self._client, method, path, content=content, params=params,
                                               headers=headers)
            except httpx.HTTPError as exc:
                error: StreamtxError = UnavailableError(f"{method} {path}: {exc!r}")
            else:
                if response.status_code < 400:
                    return orjson.loads(response.content) if response.content else None
                error = error_from_response(response)
                if not error.retriable:
                    raise error
            if attempt == tries - 1:
                raise error
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, self.max_backoff_s)
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        await self._client.aclose()
