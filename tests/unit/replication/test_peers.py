"""A peer's discovery carries no credential (issue 21 item 15).

Before: the controller asked ``<service_url>/v1/cluster`` with its service token (the token
of this cluster, by default), so registering any URL, of another cluster or of anyone at
all, handed the token there before the name was ever checked. ``/v1/cluster`` is open to
anyone: discovery needs none, and the token goes only to the broker of the named cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest

from streamtx.errors import ConflictError
from streamtx.replication.peers import Peers


class Stranger:
    """An HTTP server answering ``/v1/cluster`` as cluster ``name``; the headers it was sent."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.headers: list[dict[str, str]] = []
        self.url = ""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        self.headers.append({k.lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:] if h)})
        body = orjson.dumps({"cluster": self.name, "services": {"broker": self.url}})
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                     b"connection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()


@pytest.fixture
async def stranger() -> AsyncIterator[Stranger]:
    s = Stranger("evil")
    server = await asyncio.start_server(s.serve, "127.0.0.1", 0)
    s.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        yield s


async def test_registering_a_url_that_is_another_cluster_sends_it_no_token(stranger: Stranger) -> None:
    peers = Peers(timeout_s=5, token="the-service-token")
    with pytest.raises(ConflictError):
        await peers.check("b", stranger.url)
    assert stranger.headers and all("authorization" not in h for h in stranger.headers)


async def test_discovery_of_the_named_cluster_sends_no_token_either(stranger: Stranger) -> None:
    peers = Peers(timeout_s=5, token="the-service-token")
    assert await peers.check("evil", stranger.url) == stranger.url
    assert stranger.headers and all("authorization" not in h for h in stranger.headers)
    await peers.aclose()
