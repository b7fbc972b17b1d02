"""Switching batched log writes on and off under load loses nothing, and the
mixed log (batched and unbatched entries) replays after a kill -9."""

from __future__ import annotations

import asyncio
import random

from streamtx.ledger import open_ledger_factory
from tests.integration.coordinator.conftest import TOPIC, ClientFactory, TcClient, TcFactory
from tests.integration.coordinator.participant import Participant

MAGIC = b"\x0e\x01"


async def _lifecycles(
    tc: TcClient, rng: random.Random, stop: asyncio.Event, out: dict[str, tuple[str, str]]
) -> None:
    while not stop.is_set():
        txn = await tc.create()
        part = f"{TOPIC}-partition-{rng.randrange(4)}"
        await tc.add_partitions(txn, [part])
        if rng.random() < 0.2:
            out[txn] = ("OPEN", part)
            continue
        action = "commit" if rng.random() < 0.7 else "abort"
        body = await (tc.commit(txn) if action == "commit" else tc.abort(txn))
        out[txn] = (body["state"], part)


async def _entry_kinds(url: str) -> tuple[int, int]:
    """(batched, unbatched) data entries in the coordinator's log, read directly."""
    ledgers = open_ledger_factory(url)
    try:
        ledger = await ledgers.open("txnlog/standalone/0", writer=False)
        batched = unbatched = 0
        start = None
        while entries := await ledger.read(start, 1000):
            for e in entries:
                if e.data[:2] == MAGIC:
                    batched += 1
                else:
                    unbatched += 1
            last = entries[-1].position
            start = type(last)(last.ledger_id, last.entry_id + 1)
        return batched, unbatched
    finally:
        await ledgers.close()


async def test_switching_batching_under_load_loses_nothing(
    backend_url: str, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    proc = tc_factory(backend_url)
    tc = client_factory(proc)
    seen: dict[str, tuple[str, str]] = {}
    rng = random.Random(3)
    stop = asyncio.Event()
    workers = [asyncio.create_task(_lifecycles(tc, random.Random(rng.random()), stop, seen))
               for _ in range(32)]
    # Bounded by work done, not by time: a loaded machine only takes longer.
    enabled, toggles = True, 0
    while toggles < 20 or len(seen) < 200:
        enabled = not enabled
        toggles += 1
        out = await tc.admin("tcBatchLog", "POST", json={"enabled": enabled})
        assert out["txnTcBatchLogEnabled"] is enabled
        await asyncio.sleep(0.15)
    stop.set()
    await asyncio.gather(*workers)

    proc.kill9()
    batched, unbatched = await _entry_kinds(backend_url)
    assert batched > 5 and unbatched > 5, (batched, unbatched)

    proc.start()  # batching back to its setting: on
    assert (await tc.admin("tcBatchLogStat"))["txnTcBatchLogEnabled"] is True
    for txn, (state, part) in seen.items():
        body = await tc.get(txn)
        assert body["partitions"] == [part]
        if state == "OPEN":
            assert body["state"] == "OPEN"
            continue
        assert body["state"] == state
        action = "commit" if state == "COMMITTED" else "abort"
        assert participant.actions(txn) == {("partition", part): action}
    assert participant.violations == []
