"""A call caught by a graceful handover of its coordinator id is told the id moves.

The ownership loop hands an id over by closing its coordinator (``Coordinators.release``):
a call that had already reached that coordinator and appends after the close used to fail
with the log's "closed" error, a 500 the clients gave up on (the whole-deployment test's
scale-up aborted transactions on it). It must be a 503 ``not_owner``, which the SDK and the
services' clients wait out and retry at the new owner, so a handover is only latency.
"""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from streamtx.coordinator.participants_client import Participants
from streamtx.coordinator.registry import Coordinators
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.errors import NotOwnerError
from streamtx.ledger import open_ledger_factory

partition = "persistent://t/n/handover-partition-0"


async def test_a_call_waiting_on_its_transaction_when_the_id_is_handed_over_gets_not_owner() -> None:
    settings = CoordinatorSettings(ledger_url="memory://", coordinator_ids=[0],
                                   broker_url="http://127.0.0.1:9")  # never called here
    participants = Participants(settings.broker_url, None, backoff_s=0.05, max_backoff_s=0.1,
                                timeout_s=1.0, prepare_attempts=1)
    coordinators = Coordinators(settings, open_ledger_factory("memory://"), participants,
                                registry=CollectorRegistry())
    await coordinators.start()
    try:
        tc = coordinators.by_id(0)
        meta = await tc.create(60_000)
        async with meta.get_lock():  # a call on the transaction waits behind its lock ...
            call = asyncio.create_task(tc.add_partitions(meta.txn, [partition]))
            await asyncio.sleep(0.01)
            assert not call.done()
            await coordinators.release(0)  # ... while the id is handed over
        with pytest.raises(NotOwnerError) as caught:
            await call
        assert caught.value.status == 503 and caught.value.owner is None
        # A call that still holds the closed coordinator, and one that arrives now, likewise.
        with pytest.raises(NotOwnerError):
            await tc.add_partitions(meta.txn, [partition])
        with pytest.raises(NotOwnerError):
            coordinators.owner(meta.txn)
    finally:
        await coordinators.close()
        await participants.aclose()
