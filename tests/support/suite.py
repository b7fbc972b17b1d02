"""The whole suite (broker, pending-ack store, coordinator) as real processes over real HTTP.

    with Suite(ledger_url, log_dir) as suite:
        async with StreamtxClient(suite.url) as client: ...
        suite.broker.kill9(); suite.broker.start()

Every service knows the others' URLs (``/v1/cluster``); a restarted service
keeps its port. Participants start before the coordinator that recovers into
them. ``env`` adds settings for every service, ``<service>_env`` for one.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from streamtx.client import Consumer, Message, StreamtxClient
from tests.support.services import ServiceProcess

ORDER = ("broker", "pendingack", "coordinator", "replication")  # participants before the coordinator
DEFAULT = ORDER[:3]  # the replication controller runs only where a test asks for it


class Suite:
    """Service processes (all three unless told) sharing one ledger URL (their ledger names are distinct)."""

    def __init__(
        self, ledger_url: str, log_dir: Path, *, env: dict[str, str] | None = None,
        broker_env: dict[str, str] | None = None, pendingack_env: dict[str, str] | None = None,
        coordinator_env: dict[str, str] | None = None, services: tuple[str, ...] = DEFAULT,
        replication_env: dict[str, str] | None = None,
    ) -> None:
        self.ledger_url = ledger_url
        common = {"STREAMTX_LEDGER_URL": ledger_url, "STREAMTX_TEST_LOG_DIR": str(log_dir), **(env or {})}
        own = {"broker": broker_env, "pendingack": pendingack_env, "coordinator": coordinator_env,
               "replication": replication_env}
        # Only ``services`` run; the others are absent from /v1/cluster.
        self.procs = {name: ServiceProcess(name, {**common, **(own[name] or {})})
                      for name in ORDER if name in services}
        urls = {f"STREAMTX_{name.upper()}_URL": p.url for name, p in self.procs.items()}
        for p in self.procs.values():
            p.env.update(urls)
        self._started: list[ServiceProcess] = []

    @property
    def broker(self) -> ServiceProcess:
        return self.procs["broker"]

    @property
    def pendingack(self) -> ServiceProcess:
        return self.procs["pendingack"]

    @property
    def coordinator(self) -> ServiceProcess:
        return self.procs["coordinator"]

    @property
    def replication(self) -> ServiceProcess:
        return self.procs["replication"]

    @property
    def url(self) -> str:
        """The URL a client starts from (it discovers the others)."""
        return self.coordinator.url

    def start(self, timeout: float = 60.0) -> Suite:
        try:
            for proc in self.procs.values():
                self._started.append(proc.start(timeout))
        except BaseException:
            self.stop()
            raise
        return self

    def ensure_running(self) -> None:
        """Start again any service that is not running (a test that failed mid-crash)."""
        for proc in self.procs.values():
            if proc in self._started and (proc.proc is None or proc.proc.poll() is not None):
                proc.start()

    def stop(self) -> None:
        for p in reversed(self._started):
            p.stop()
        self._started.clear()

    def __enter__(self) -> Suite:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
    ) -> None:
        self.stop()


async def everything(client: StreamtxClient, name: str) -> list[bytes]:
    """All a fresh Exclusive reader from the earliest position sees now (nothing acked)."""
    reader = await client.consumer(name, f"all-{uuid.uuid4().hex[:6]}", "earliest", "Exclusive")
    out: list[bytes] = []
    while msgs := await reader.receive(max=500, wait_ms=300):
        out += [m.value for m in msgs]
    return out


async def receive(consumer: Consumer, n: int, timeout_s: float = 10.0) -> list[Message]:
    """Up to ``n`` messages, long-polling for at most ``timeout_s``."""
    loop = asyncio.get_running_loop()
    out: list[Message] = []
    deadline = loop.time() + timeout_s
    while len(out) < n and loop.time() < deadline:
        out += await consumer.receive(max=n - len(out), wait_ms=300)
    return out


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 15.0, what: str = "") -> None:
    """Wait until ``check()`` holds; fail the test after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        await asyncio.sleep(0.1)


Send = Callable[..., Awaitable[httpx.Response]]


async def _request(http: httpx.AsyncClient, method: str, url: str, **kw: Any) -> httpx.Response:
    return await http.request(method, url, **kw)


async def until_served(
    http: httpx.AsyncClient, method: str, url: str, *, timeout_s: float = 30.0,
    retry_on: Collection[int] = (503,), connection_errors: bool = False, send: Send = _request, **kw: Any,
) -> httpx.Response:
    """``http.request(method, url, **kw)`` again while it answers 503, the status a client
    waits out (API.md: an id whose owner is still taking it, a partition still opening),
    until ``timeout_s``; the last answer, whatever it is: the caller asserts it.

    ``retry_on``: the statuses waited out. ``connection_errors``: a failed connection (a
    killed worker's) is waited out too, the last one raised at the deadline. ``send``: in
    place of ``http.request`` (``send_to_owner``, which follows the owners' 307s).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            r = await send(http, method, url, **kw)
        except httpx.TransportError:
            if not connection_errors or loop.time() > deadline:
                raise
        else:
            if r.status_code not in retry_on or loop.time() > deadline:
                return r
        await asyncio.sleep(0.1)
