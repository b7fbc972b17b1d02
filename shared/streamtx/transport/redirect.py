"""Following a request to the replica that owns its log.

A replica that does not own a log answers ``307`` with the owner's URL in
``Location`` (``NotOwnerError``), or ``503`` with ``owner: null`` while the log
moves. httpx's own redirect following drops the ``Authorization`` header when
the origin changes (another replica is another host or port), so clients follow
these redirects here, with the request's own headers: a handover is then only
latency to the caller.

An :class:`OwnerCache` (the SDK's) remembers where each URL was redirected, so the
next request for the same log (a topic's produce or fetch path, say) goes to its
owner straight away; a 503 or a refused connection there forgets it, and the
next try starts again from the URL the caller gave (which redirects to the new
owner).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import httpx

__all__ = ["OwnerCache", "OwnerGone", "max_hops", "send_to_owner"]

max_hops = 3  # an owner map a tick out of date can point at the previous owner once or twice


class OwnerGone(httpx.ConnectError):
    """The owner a 307 (or the cache) named refused the connection: it died, and its lease
    has not run out yet. Nothing was sent, so the caller may try again from its own URL."""


class OwnerCache:
    """Request URL -> the owner's URL for it, the ``size`` most recently used."""

    def __init__(self, size: int = 10_000) -> None:
        self._size = size
        self._map: OrderedDict[str, str] = OrderedDict()

    def get(self, url: str) -> str | None:
        target = self._map.get(url)
        if target is not None:
            self._map.move_to_end(url)
        return target

    def put(self, url: str, target: str) -> None:
        self._map[url] = target
        self._map.move_to_end(url)
        while len(self._map) > self._size:
            self._map.popitem(last=False)

    def forget(self, url: str) -> None:
        self._map.pop(url, None)


async def send_to_owner(client: httpx.AsyncClient, method: str, url: str, *, owners: OwnerCache | None = None,
                        **kw: Any) -> httpx.Response:
    """``client.request`` that follows the owners' 307s (at most :data:`max_hops`)."""
    target = (owners.get(url) if owners is not None else None) or url
    try:
        response = await client.request(method, target, **kw)
        for _ in range(max_hops):
            location = response.headers.get("location")
            if response.status_code != 307 or not location:
                break
            target = location
            response = await client.request(method, location, **kw)
    except httpx.TransportError as exc:
        if owners is not None:
            owners.forget(url)
        if target != url and isinstance(exc, httpx.ConnectError):
            raise OwnerGone(str(exc), request=exc.request) from exc
        raise
    if owners is not None:
        if response.status_code == 503:
            owners.forget(url)
        elif target != url and response.status_code < 300:
            # Where the 307s led, without the query string (params are passed apart).
            owners.put(url, target.split("?", 1)[0])
    return response
