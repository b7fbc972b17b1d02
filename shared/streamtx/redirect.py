"""Following a request to the replica that owns its log.

A replica that does not own a log answers ``307`` with the owner's URL in
``Location`` (``NotOwnerError``). httpx's own redirect following drops the
``Authorization`` header when the origin changes (another replica is another
host or port), so clients follow these redirects here, with the request's own
headers: a handover is then only latency to the caller.
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["max_hops", "send_to_owner"]

max_hops = 3  # an owner map a tick out of date can point at the previous owner once or twice


async def send_to_owner(client: httpx.AsyncClient, method: str, url: str, **kw: Any) -> httpx.Response:
    """``client.request`` that follows the owners' 307s (at most :data:`max_hops`)."""
    response = await client.request(method, url, **kw)
    for _ in range(max_hops):
        location = response.headers.get("location")
        if response.status_code != 307 or not location:
            break
        response = await client.request(method, location, **kw)
    return response
