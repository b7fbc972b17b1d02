"""A client-side transaction: registers what it touches with the coordinator, then commits.

The coordinator must know every partition a transaction produces to and every
subscription it acks on before the broker sees the produce or the ack (Pulsar's
data flow, docs/background.md). :class:`Transaction` remembers what it registered, so each
partition and subscription costs one coordinator call per transaction, and
concurrent registrations of the same one share that call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from streamtx.client.http import Endpoint
from streamtx.contracts import TxnId, TxnState
from streamtx.errors import StreamtxError

log = logging.getLogger(__name__)


class Transaction:
    """An open transaction; use ``async with client.transaction() as txn``."""

    def __init__(self, coordinator: Endpoint, txn_id: str) -> None:
        self._tc = coordinator
        self.id = TxnId.parse(txn_id)  # the coordinator's answer, checked by the one parser
        self.txn_id = str(self.id)
        #: The state's name as the coordinator reports it (a :class:`TxnState` name).
        self.state = TxnState.OPEN.name
        self._partitions: dict[str, asyncio.Future[None]] = {}
        self._subscriptions: dict[tuple[str, str], asyncio.Future[None]] = {}

    def __str__(self) -> str:
        return self.txn_id

    @classmethod
    async def open(cls, coordinator: Endpoint, timeout_ms: int) -> Transaction:
        body = await coordinator.call("POST", "/v1/transactions", json={"timeout_ms": timeout_ms},
                                      idempotent=False)
        return cls(coordinator, str(body["txn_id"]))

    async def add_partitions(self, partitions: Iterable[str]) -> None:
        """Register partitions (``persistent://t/n/x-partition-i``) before producing to them."""
        wanted = set(partitions)
        new = sorted(p for p in wanted if p not in self._partitions)
        if new:
            future = asyncio.get_running_loop().create_future()
            for p in new:
                self._partitions[p] = future
            await self._register(future, f"/v1/transactions/{self.txn_id}/partitions",
                                 {"partitions": new}, lambda: [self._partitions.pop(p, None) for p in new])
        await asyncio.gather(*(self._partitions[p] for p in wanted))

    async def add_subscription(self, topic: str, subscription: str) -> None:
        """Register a subscription before acking on it in this transaction."""
        key = (topic, subscription)
        if key not in self._subscriptions:
            future = asyncio.get_running_loop().create_future()
            self._subscriptions[key] = future
            body = {"subscriptions": [{"topic": topic, "subscription": subscription}]}
            await self._register(future, f"/v1/transactions/{self.txn_id}/subscriptions", body,
                                 lambda: self._subscriptions.pop(key, None))
        await self._subscriptions[key]

    async def _register(self, future: asyncio.Future[None], path: str, body: Any, forget: Any) -> None:
        try:
            await self._tc.call("POST", path, json=body)
        except BaseException as exc:
            forget()  # a later call may try again
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it, nobody logs it as lost
            raise
        future.set_result(None)

    @property
    def partitions(self) -> list[str]:
        return sorted(self._partitions)

    @property
    def subscriptions(self) -> list[tuple[str, str]]:
        return sorted(self._subscriptions)

    async def commit(self) -> None:
        """Commit; ConflictError (409) when the coordinator already aborted it."""
        body = await self._tc.call("POST", f"/v1/transactions/{self.txn_id}/commit")
        self.state = _state_of(body, TxnState.COMMITTED)

    async def abort(self) -> None:
        """Abort; ConflictError (409) when it is already committing or committed."""
        body = await self._tc.call("POST", f"/v1/transactions/{self.txn_id}/abort")
        self.state = _state_of(body, TxnState.ABORTED)

    async def metadata(self) -> Any:
        """The coordinator's view: state, partitions, subscriptions, timestamps."""
        return await self._tc.call("GET", f"/v1/transactions/{self.txn_id}")


def _state_of(body: Any, default: TxnState) -> str:
    state = TxnState.parse(body.get("state")) if isinstance(body, dict) else None
    return (state or default).name


class TransactionScope:
    """``async with``: open on enter, commit on a clean exit, abort on an exception."""

    def __init__(self, coordinator: Endpoint, timeout_ms: int) -> None:
        self._tc = coordinator
        self._timeout_ms = timeout_ms
        self._txn: Transaction | None = None

    async def __aenter__(self) -> Transaction:
        self._txn = await Transaction.open(self._tc, self._timeout_ms)
        return self._txn

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
    ) -> None:
        assert self._txn is not None
        if exc is None:
            await self._txn.commit()
            return
        try:
            await self._txn.abort()
        except StreamtxError as abort_error:
            # The original error matters more; the coordinator's timeout
            # aborts the transaction anyway if this abort never arrived.
            log.warning("abort of %s after %r failed: %s", self._txn.txn_id, exc, abort_error)
