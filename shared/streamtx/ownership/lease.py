"""Members and leases in Redis, with fencing tokens.

Keys, all under ``streamtx:<cluster>:<service>:``::

    members            sorted set: member name -> expiry (ms since the epoch)
    urls               hash: member name -> the URL it serves on
    lease:<item>       string "<member>|<token>", with a TTL (PX)
    fence:<item>       integer, INCR'd for every new lease: the fencing token
    epoch              a random value, written once (no TTL): a new one means Redis lost its keys

A lease is taken only when nobody holds it (``SET`` under a Lua script, so the
check and the write are one step), renewed and released only by its holder with
its token. Tokens only grow, so a token names one tenure of one owner.

Time is Redis's: TTLs run on the server, so a paused process cannot stretch its
lease; it finds the lease gone (or another's) when it wakes. Membership expiries
are the server's time too (``TIME`` in the scripts): written and compared with
each replica's own clock, one running ahead dropped every other member at each
heartbeat, and one running behind was never a member to the others.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

# redis is imported with the first Redis client, not with the service (issue 25: restarts).
if TYPE_CHECKING:
    import redis.asyncio as redis

__all__ = ["Lease", "LeaseStore"]

# KEYS: lease, fence; ARGV: member, ttl ms. Returns the token, or nil if another holds it.
_acquire = """
local cur = redis.call('GET', KEYS[1])
if cur then
  local owner, token = string.match(cur, '^(.*)|(%d+)$')
  if owner == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(token)
  end
  return nil
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. token, 'PX', ARGV[2])
return token
"""

# KEYS: lease; ARGV: "<member>|<token>", ttl ms. 1 if renewed, 0 if not ours any more.
_renew = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

# KEYS: lease; ARGV: "<member>|<token>". 1 if released, 0 if it was not ours.
_release = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""


# The server's clock in ms (scripts calling TIME write their effects, not themselves: Redis 5+).
_server_now = """
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: members, urls; ARGV: member, url, ttl ms. Alive until the server's now + ttl.
_heartbeat = _server_now + """
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return now
"""

# KEYS: members. The members alive at the server's now.
_members = _server_now + """
return redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf')
"""


@dataclass(frozen=True, slots=True)
class Lease:
    """One tenure: ``member`` owns ``item`` with fencing token ``token``."""

    item: str
    member: str
    token: int

    @property
    def value(self) -> str:
        return f"{self.member}|{self.token}"


class LeaseStore:
    """Membership and leases of one service of one cluster, in Redis."""

    def __init__(self, client: redis.Redis, *, cluster: str, service: str) -> None:
        """``client`` must decode responses (``decode_responses=True``)."""
        self._r = client
        self._cluster, self._service = cluster, service
        self._prefix = f"streamtx:{cluster}:{service}:"
        self._acquire = client.register_script(_acquire)
        self._renew = client.register_script(_renew)
        self._release = client.register_script(_release)
        self._heartbeat = client.register_script(_heartbeat)
        self._members = client.register_script(_members)

    @classmethod
    def from_url(cls, url: str, *, cluster: str, service: str) -> LeaseStore:
        import redis.asyncio as redis

        return cls(redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0,
                                        decode_responses=True), cluster=cluster, service=service)

    def twin(self) -> LeaseStore:
        """The same store over a Redis client of its own (one for another thread's event loop)."""
        import redis.asyncio as redis

        pool = self._r.connection_pool
        client = redis.Redis(connection_pool=redis.ConnectionPool(
            connection_class=pool.connection_class, **pool.connection_kwargs))
        return LeaseStore(client, cluster=self._cluster, service=self._service)

    async def aclose(self) -> None:
        await self._r.aclose(close_connection_pool=True)  # a twin's pool is its own too

    def _key(self, name: str) -> str:
        return self._prefix + name

    # -- membership -----------------------------------------------------------------
    async def heartbeat(self, member: str, url: str, ttl_ms: int) -> None:
        """Say ``member`` is alive for ``ttl_ms`` more (by the server's clock), serving on ``url``."""
        await self._heartbeat(keys=[self._key("members"), self._key("urls")], args=[member, url, ttl_ms])

    async def leave(self, member: str) -> None:
        async with self._r.pipeline(transaction=True) as p:
            p.zrem(self._key("members"), member)
            p.hdel(self._key("urls"), member)
            await p.execute()

    async def members(self) -> list[str]:
        """The members whose heartbeat has not expired, sorted."""
        names = await self._members(keys=[self._key("members")])
        return sorted(str(n) for n in names)

    async def url_of(self, member: str) -> str | None:
        url = await self._r.hget(self._key("urls"), member)
        return str(url) if url is not None else None

    async def epoch(self) -> str:
        """This store's epoch: a random value written once, kept (it never expires) and read
        back. Another value than the last one read means Redis lost its keys meanwhile
        (restarted empty): the leases it granted before are gone, while their holders
        believe in them until their next renewal is refused."""
        async with self._r.pipeline(transaction=True) as p:
            p.set(self._key("epoch"), uuid.uuid4().hex, nx=True)
            p.get(self._key("epoch"))
            _, value = await p.execute()
        return str(value)

    # -- leases ---------------------------------------------------------------------
    async def acquire(self, item: str, member: str, ttl_ms: int) -> Lease | None:
        """Take ``item``'s lease for ``member`` (or extend it if already ``member``'s)."""
        token = await self._acquire(keys=[self._key(f"lease:{item}"), self._key(f"fence:{item}")],
                                    args=[member, ttl_ms])
        return Lease(item, member, int(token)) if token is not None else None

    async def renew(self, lease: Lease, ttl_ms: int) -> bool:
        """Extend a lease we hold; False when it expired or another member holds it now."""
        return bool(await self._renew(keys=[self._key(f"lease:{lease.item}")], args=[lease.value, ttl_ms]))

    async def renew_all(self, leases: list[Lease], ttl_ms: int) -> list[bool]:
        """:meth:`renew` each of ``leases`` in one round trip (a replica holding many items
        renews them all within the same few milliseconds, however slow Redis answers)."""
        if not leases:
            return []
        async with self._r.pipeline(transaction=False) as p:
            for lease in leases:
                await self._renew(keys=[self._key(f"lease:{lease.item}")], args=[lease.value, ttl_ms],
                                  client=p)
            return [bool(ok) for ok in await p.execute()]

    async def release(self, lease: Lease) -> bool:
        return bool(await self._release(keys=[self._key(f"lease:{lease.item}")], args=[lease.value]))

    async def holder(self, item: str) -> Lease | None:
        """Who holds ``item`` now, if anybody."""
        raw = await self._r.get(self._key(f"lease:{item}"))
        if raw is None:
            return None
        member, _, token = str(raw).rpartition("|")
        return Lease(item, member, int(token))


    async def holders(self, items: list[str]) -> dict[str, str | None]:
        """Who holds each of ``items`` now (member name, None if nobody): one MGET for all."""
        if not items:
            return {}
        raws = await self._r.mget([self._key(f"lease:{item}") for item in items])
        return {item: str(raw).rpartition("|")[0] if raw is not None else None
                for item, raw in zip(items, raws, strict=True)}

    async def urls(self) -> dict[str, str]:
        """Every member's URL."""
        return {str(k): str(v) for k, v in (await self._r.hgetall(self._key("urls"))).items()}

