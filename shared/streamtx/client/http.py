"""The SDK's HTTP layer: one keep-alive httpx client shared by every service's :class:`Endpoint`.

Only calls that are safe to repeat are retried (reads, the coordinator's
idempotent calls, a named producer's sends, acks); an unnamed producer's send
is never retried, since the broker could not drop the duplicate. The HTTP
client and the retry policy are :mod:`streamtx.transport`'s, as in the services.
"""

from __future__ import annotations

from typing import Any

import httpx

from streamtx.errors import AuthError
from streamtx.transport import ONCE, HttpClient, RetryPolicy
from streamtx.transport.redirect import OwnerCache

__all__ = ["SDK_RETRY", "AuthError", "Endpoint"]

#: What the SDK does with a call that is safe to repeat: four tries, 50 ms doubling.
SDK_RETRY = RetryPolicy(attempts=4, backoff_s=0.05, max_backoff_s=2.0)
#: How long a call waits for a log moving between replicas (a dead owner's lease to run out).
MOVING_WAIT_S = 30.0


class Endpoint:
    """Calls to one service's base URL."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, retry: RetryPolicy = SDK_RETRY,
                 owners: OwnerCache | None = None) -> None:
        """``owners``: the cache of where each path's log lives (replicated services)."""
        self._http = HttpClient(base_url, http=client, retry=retry, owners=owners,
                                moving_wait_s=MOVING_WAIT_S if owners is not None else 0.0)
        self.base_url = self._http.base_url

    async def call(
        self, method: str, path: str, *, json: Any = None, params: Any = None, idempotent: bool = True,
    ) -> Any:
        """Send; return the decoded JSON body, or raise the error the response stands for."""
        return await self._http.request(method, path, json=json, params=params,
                                        retry=None if idempotent else ONCE)

    async def call_bytes(
        self, method: str, path: str, *, content: bytes | None = None, content_type: str | None = None,
        accept: str | None = None, params: Any = None, idempotent: bool = True,
        moving_wait_s: float | None = None,
    ) -> tuple[str, bytes]:
        """Send a raw body (the binary batch format); the answer's content type and bytes."""
        headers = {}
        if content_type is not None:
            headers["content-type"] = content_type
        if accept is not None:
            headers["accept"] = accept
        response = await self._http.send(method, path, content=content, headers=headers, params=params,
                                         retry=None if idempotent else ONCE, moving_wait_s=moving_wait_s)
        return response.headers.get("content-type", ""), response.content
