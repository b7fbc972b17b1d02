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

from streamtx.contracts.txnid import TxnId
from streamtx.coordinator.participants_client import Participants
from streamtx.coordinator.registry import Coordinators
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.errors import NotOwnerError, NotServedError
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


async def test_a_configured_id_nobody_here_knows_the_owner_of_is_moving_not_unknown() -> None:
    """A replica that has not balanced yet (just restarted: no ids, an empty owner map) answered a
    commit retry for one of the configured ids with 404 not_served; the demo worker read it as an
    unknown transaction and rolled back a commit the id's new owner then finished (an aborted
    read in the deployment test's kill case). It is a 503 not_owner; an id nobody configured
    stays a 404."""
    settings = CoordinatorSettings(ledger_url="memory://", coordinator_ids=[0, 1],
                                   broker_url="http://127.0.0.1:9")
    participants = Participants(settings.broker_url, None, backoff_s=0.05, max_backoff_s=0.1,
                                timeout_s=1.0, prepare_attempts=1)
    coordinators = Coordinators(settings, open_ledger_factory("memory://"), participants,
                                registry=CollectorRegistry())
    try:  # not started: a replica before its first share of the ids
        with pytest.raises(NotOwnerError) as caught:
            coordinators.owner(TxnId(1 << 48, 38))
        assert caught.value.status == 503 and caught.value.owner is None
        with pytest.raises(NotServedError):
            coordinators.owner(TxnId(5 << 48, 1))
    finally:
        await coordinators.close()
        await participants.aclose()
