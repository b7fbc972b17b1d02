"""Exclusive subscriptions over broker replicas: one consumer for the whole topic, claimed in Redis.

Broker replicas own partitions, so one subscription's partitions are dispatched
by several brokers, each with its own :class:`~streamtx.broker.subscription.Subscription`.
Each of them admits one Exclusive consumer at a time, which alone would make
Exclusive per broker: two consumers attaching through different brokers at
once could each hold one broker's partitions. As in Pulsar, where an Exclusive
consumer of a partitioned topic holds every partition (a second one is refused),
the consumer is chosen once for the topic: a fetch of an Exclusive subscription
first claims it in Redis (the lease store's server), under
``streamtx:<cluster>:broker:exclusive:<topic>|<subscription>`` = the consumer's
name, for ``exclusive_idle_ms`` past the fetch's own wait (a long poll longer than
that must not let the claim expire under it: a second consumer would be let in
while the first one's poll may still hand it messages). The holder's fetches renew
the claim (asked of Redis only when less than three quarters of that time is
left: a claim renewed less than a quarter ago is alive for sure), another
consumer's claim is refused (409, as a busy Exclusive subscription is on one
broker), and the claim is given up when the consumer closes or expires after
``exclusive_idle_ms`` without a fetch.

Redis decides who consumes, not what is stored: acks and the cursors stay with
the partitions' owners, so a lost Redis key (a Redis restart) can at worst let
a second consumer in, never lose or duplicate an acknowledged position. Redis
unreachable: the fetch answers 503 (retryable).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

# redis is imported with the first Redis client, not with the service (issue 25: restarts).
if TYPE_CHECKING:
    import redis.asyncio as redis

from streamtx.errors import ConflictError, UnavailableError

__all__ = ["ExclusiveClaims"]

# KEYS: the claim; ARGV: consumer, ttl ms. The holder after the call (the consumer if it got it).
_claim = """
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then
  return cur
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ARGV[1]
"""

# KEYS: the claim; ARGV: consumer. Deleted only if that consumer holds it.
_release = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class ExclusiveClaims:
    """Which consumer holds each Exclusive subscription of the cluster (a claim in Redis)."""

    def __init__(self, client: redis.Redis, cluster: str, ttl_ms: int) -> None:
        """``client`` must decode responses (``decode_responses=True``)."""
        self._r = client
        self._prefix = f"streamtx:{cluster}:broker:exclusive:"
        self._ttl_ms = ttl_ms
        self._claim = client.register_script(_claim)
        self._release = client.register_script(_release)
        self._renewed: dict[tuple[str, str], tuple[str, float]] = {}  # -> (consumer, expiry)

    @classmethod
    def from_url(cls, url: str, cluster: str, ttl_ms: int) -> ExclusiveClaims:
        import redis.asyncio as redis

        return cls(redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0,
                                        decode_responses=True), cluster, ttl_ms)

    def _key(self, topic: str, sub: str) -> str:
        return f"{self._prefix}{topic}|{sub}"

    async def claim(self, topic: str, sub: str, consumer: str, hold_ms: int = 0) -> None:
        """Hold (or keep holding) ``sub`` for ``consumer``, for ``hold_ms`` (the fetch's wait) and
        ``exclusive_idle_ms`` after; 409 when another consumer holds it."""
        now = asyncio.get_running_loop().time()
        held = self._renewed.get((topic, sub))
        left_s = held[1] - now if held is not None and held[0] == consumer else 0.0
        if left_s > (hold_ms + self._ttl_ms * 3 / 4) / 1000:
            return
        ttl_ms = hold_ms + self._ttl_ms
        from redis import RedisError

        try:
            holder = str(await self._claim(keys=[self._key(topic, sub)], args=[consumer, ttl_ms]))
        except (RedisError, OSError) as exc:
            raise UnavailableError(f"the Exclusive claim of {topic}/{sub} (Redis): {exc!r}") from exc
        if holder != consumer:
            self._renewed.pop((topic, sub), None)
            raise ConflictError(f"subscription {sub} is Exclusive and has consumer {holder}")
        self._renewed[(topic, sub)] = (consumer, now + ttl_ms / 1000)

    async def release(self, topic: str, sub: str, consumer: str) -> None:
        """``consumer`` closed: the subscription is free for the next one at once."""
        if (held := self._renewed.get((topic, sub))) is not None and held[0] == consumer:
            del self._renewed[(topic, sub)]
        from redis import RedisError

        try:
            await self._release(keys=[self._key(topic, sub)], args=[consumer])
        except (RedisError, OSError) as exc:
            raise UnavailableError(f"releasing the Exclusive claim of {topic}/{sub}: {exc!r}") from exc

    async def aclose(self) -> None:
        await self._r.aclose(close_connection_pool=True)
