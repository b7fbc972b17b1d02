"""Stats of a topic whose partitions are spread over broker replicas: asked of each owner, merged.

Broker replicas own partitions; the topic's own name is served where every
partition is open. ``GET /admin/v2/persistent/{t}/{ns}/{topic}/stats`` is the one
admin read that spans partitions, so on a spread topic it fans out: the
partitions open here answer from memory, every other one is asked of its owner
under its own name (``x-partition-N``, which answers that partition alone), and
the answers are merged (:func:`merge`, pure) as if one broker held them all.
Each partition's ``replication`` rows (its replicator cursors live with it)
combine as one broker's do (:func:`streamtx.broker.replication.state.combine`). A partition that has no
owner right now (moving) makes the whole call 503, as for any request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from streamtx.broker.replication import state as replication
from streamtx.errors import NotOwnerError
from streamtx.transport import HttpClient

__all__ = ["fetch_partition_stats", "merge", "merge_subscription"]

_summed = ("msgBacklog", "unackedMessages", "pendingRedelivery", "heldByTransactions", "msgOutCounter")


def merge_subscription(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One subscription's stats from its partitions' (in partition order)."""
    out: dict[str, Any] = {"type": parts[0]["type"]}
    for key in _summed:
        out[key] = sum(int(p[key]) for p in parts)
    out["markDeletePositions"] = [m for p in parts for m in p["markDeletePositions"]]
    consumers: dict[str, int] = {}
    for p in parts:
        for c in p["consumers"]:
            consumers[c["consumerName"]] = consumers.get(c["consumerName"], 0) + int(c["msgOutCounter"])
    out["consumers"] = [{"consumerName": n, "msgOutCounter": v} for n, v in consumers.items()]
    out["activeConsumerName"] = next((n for p in parts if (n := p["activeConsumerName"])), None)
    active = [p["activeConsumers"] for p in parts if p.get("activeConsumers") is not None]
    out["activeConsumers"] = {k: v for a in active for k, v in a.items()} if active else None
    return out


def merge(topic: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The topic's stats from one answer per partition (each of ONE partition, in order)."""
    names = sorted({s for p in parts for s in p["subscriptions"]})
    return {
        "topic": topic,
        "partitions": [row for p in parts for row in p["partitions"]],
        "storageSize": sum(int(p["storageSize"]) for p in parts),
        "subscriptions": {n: merge_subscription([p["subscriptions"][n] for p in parts
                                                 if n in p["subscriptions"]]) for n in names},
        "replication": replication.combine([p["replication"] for p in parts]),
    }


async def fetch_partition_stats(owner: HttpClient, path: str) -> dict[str, Any]:
    """``GET {owner}{path}`` (following a 307 if it moved meanwhile); its JSON, or its error."""
    body: dict[str, Any] = await owner.request("GET", path)
    return body


async def gather(topic: str, count: int, local: Callable[[int], Awaitable[dict[str, Any] | None]],
                 owner_of: Callable[[int], str | None], path_of: Callable[[int], str],
                 peer: Callable[[str], HttpClient]) -> dict[str, Any]:
    """Every partition's stats, from here (``local`` answers, or None) or from its owner (``peer``
    gives the client of an owner's URL), merged."""
    async def one(i: int) -> dict[str, Any]:
        got = await local(i)
        if got is not None:
            return got
        owner = owner_of(i)
        if owner is None:
            raise NotOwnerError(f"partition {i} of {topic} is moving between brokers", None)
        return await fetch_partition_stats(peer(owner), path_of(i))

    return merge(topic, list(await asyncio.gather(*(one(i) for i in range(count)))))
