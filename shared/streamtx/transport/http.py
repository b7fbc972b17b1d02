"""The one HTTP client of streamtx: the SDK, the services' clients of each other, the demo.

An :class:`HttpClient` calls one base URL over a keep-alive httpx client (its
own, or one shared by several base URLs, as the SDK does), sends JSON with
orjson (ack and end bodies carry thousands of ids) or a pydantic model's own
serializer, and decodes every error reply by its ``error`` code
(:func:`streamtx.errors.from_reply`): what a peer raised comes back as the same
class. Retries follow the caller's :class:`~streamtx.transport.retry.RetryPolicy`.

It imports nothing of the server kit, so ``import streamtx.client`` stays light.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import httpx
import orjson
from pydantic import BaseModel

from streamtx.errors import NotOwnerError, StreamtxError, UnavailableError, from_reply
from streamtx.transport.redirect import OwnerCache, OwnerGone, max_hops, send_to_owner
from streamtx.transport.retry import OnRetry, RetryPolicy

_json_headers = {"content-type": "application/json"}
_moving_poll_s = 0.1


def encode_json(body: Any) -> bytes:
    """A request body's bytes: a pydantic model by its own serializer (unset optional fields
    left out), anything else by orjson."""
    if isinstance(body, BaseModel):
        return body.__pydantic_serializer__.to_json(body, exclude_none=True)
    return orjson.dumps(body)


def reply_error(response: httpx.Response) -> StreamtxError:
    """The streamtx error an error reply stands for, decoded by its ``error`` code."""
    try:
        body: Any = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        body = response.text[:200]
    return from_reply(response.status_code, body, f"{response.request.method} {response.request.url.path}")


def _moving(response: httpx.Response) -> bool:
    """A 503 ``not_owner``, or a 307 still there after :data:`~streamtx.transport.redirect.max_hops`
    (replicas whose owner maps disagree send it round while the log moves): nothing was served."""
    if response.status_code == 307:
        return True
    return response.status_code == 503 and b'"not_owner"' in response.content[:200]


class HttpClient:
    """Calls to one base URL with a retry policy (per client, overridable per call).

    A peer that is not deployed has no URL: ``HttpClient(None, peer=..., setting=...)``
    is :attr:`configured` False and every call raises :class:`UnavailableError`
    naming the setting, so each service's client of another says "not deployed"
    the same way (and decides in its own methods what that means for it).

    Peers found at run time (the broker replicas' owners of each partition) share one
    client's connections: :meth:`at` gives the client of another base URL over them.
    """

    def __init__(
        self,
        base_url: str | None,
        *,
        peer: str = "peer",
        setting: str = "",
        retry: RetryPolicy | None = None,
        timeout_s: float = 10.0,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        http: httpx.AsyncClient | None = None,
        max_connections: int = 200,
        owners: OwnerCache | None = None,
        moving_wait_s: float = 0.0,
    ) -> None:
        self.base_url = (base_url or "").rstrip("/")
        self.configured = base_url is not None
        self._missing = f"no {peer} is configured" + (f" ({setting})" if setting else "")
        self.retry = retry or RetryPolicy()
        self._owned = http is None
        # Replicated services (the SDK's brokers): remember each log's owner, and wait up to
        # moving_wait_s (apart from the retry policy) while a log moves or its owner is gone:
        # an owner refusing the connection or a 503 not_owner served nothing: any call may repeat.
        self._owners = owners
        self._moving_wait_s = moving_wait_s
        if http is None:
            every = {**(headers or {}), **({"authorization": f"Bearer {token}"} if token else {})}
            http = httpx.AsyncClient(
                timeout=timeout_s, headers=every,
                limits=httpx.Limits(max_connections=max_connections,
                                    max_keepalive_connections=max_connections // 2),
            )
        self._http = http

    async def request(
        self, method: str, path: str, *, json: Any = None, params: Any = None,
        retry: RetryPolicy | None = None, timeout_s: float | None = None, on_retry: OnRetry | None = None,
    ) -> Any:
        """Send (retrying as the policy says); the decoded JSON body, or the reply's error raised."""
        content = None if json is None else encode_json(json)
        headers = None if json is None else _json_headers
        response = await self.send(method, path, content=content, headers=headers, params=params,
                                   retry=retry, timeout_s=timeout_s, on_retry=on_retry)
        return orjson.loads(response.content) if response.content else None

    async def send(
        self, method: str, path: str, *, content: bytes | None = None, headers: dict[str, str] | None = None,
        params: Any = None, retry: RetryPolicy | None = None, timeout_s: float | None = None,
        on_retry: OnRetry | None = None, moving_wait_s: float | None = None, follow: bool = True,
        errors: bool = True,
    ) -> httpx.Response:
        """Send raw bytes (the binary batch format, say); the 2xx response, or the reply's error raised.

        ``moving_wait_s``: this call's wait for a moving log, instead of the client's.
        ``follow`` False: a 307 is not followed but raised (:class:`NotOwnerError`; a forwarded
        share of a spread topic must be served where it was sent). ``errors`` False: an error
        reply is returned as it came (a proxy passing a peer's answer on)."""
        if not self.configured:
            raise UnavailableError(self._missing)
        url = self.base_url + path
        timeout: Any = httpx.USE_CLIENT_DEFAULT if timeout_s is None else timeout_s

        async def once() -> httpx.Response:
            until = time.monotonic() + (self._moving_wait_s if moving_wait_s is None else moving_wait_s)
            while True:
                try:
                    # send_to_owner follows a replica's 307 to the owner with our own headers.
                    if follow:
                        response = await send_to_owner(self._http, method, url, content=content,
                                                       params=params, headers=headers, timeout=timeout,
                                                       owners=self._owners)
                    else:
                        response = await self._http.request(method, url, content=content, params=params,
                                                            headers=headers, timeout=timeout)
                except OwnerGone as exc:
                    if time.monotonic() < until:
                        await asyncio.sleep(_moving_poll_s)
                        continue
                    raise UnavailableError(f"{method} {path}: {exc!r}") from exc
                except httpx.HTTPError as exc:
                    raise UnavailableError(f"{method} {path}: {exc!r}") from exc
                if _moving(response) and time.monotonic() < until:
                    await asyncio.sleep(_moving_poll_s)
                    continue
                if response.status_code == 307:  # left over: an error, never an answer
                    raise NotOwnerError(f"{method} {path}: still redirected after {max_hops} hops "
                                        "(the log moves)" if follow
                                        else f"{method} {path}: what it names moved (retry)")
                if response.status_code >= 400 and errors:
                    raise reply_error(response)
                return response

        return await (retry or self.retry).run(once, on_retry=on_retry)

    def at(self, base_url: str) -> HttpClient:
        """The client of ``base_url`` over these connections, headers and retry policy."""
        return HttpClient(base_url, retry=self.retry, http=self._http, moving_wait_s=self._moving_wait_s)

    def for_log(self, owners: int = 8) -> HttpClient:
        """A client for the calls about ONE log (a partition), over these connections and with
        this retry policy, that remembers where the log's owner is: calls naming the log in
        their body share a path, so a cache shared by every log would send each one to the
        last log's owner and be redirected every time."""
        client = HttpClient(self.base_url, retry=self.retry, http=self._http, owners=OwnerCache(owners),
                            moving_wait_s=self._moving_wait_s)
        client.configured, client._missing = self.configured, self._missing
        return client

    async def aclose(self) -> None:
        """Close the connections, unless the httpx client is shared (its owner closes it)."""
        if self._owned:
            await self._http.aclose()
