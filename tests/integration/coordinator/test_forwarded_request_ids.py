"""Request ids in the transaction log: a mailbox request its dead owner applied is not applied twice.

Real processes: a coordinator with 2 workers over the session's redis-server and
the file ledger. The state a worker leaves when it is killed between the durable
append of a forwarded request's record and its answer is laid down first: the
log holds the record, tagged with the request's id (FORWARDED), and the request's
mailbox entry is read by that worker and never answered. The transaction ended
since. The worker that takes the id over replays the log, claims the entry,
finds its id there, and answers from its state: 200 with the partition, where
applying it again would answer 409 (the transaction is no longer open).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
import pytest
import redis.asyncio as aredis

from streamtx.batching.codec import decode_entry
from streamtx.batching.settings import BatchingSettings
from streamtx.contracts.txnid import TxnId
from streamtx.coordinator.log import TransactionLog
from streamtx.ledger import open_ledger_factory
from streamtx.ownership.mailbox import REQUEST_ID, decode_answer, encode_call
from streamtx.records.txnlog import AddPartitions, Forwarded, NewTxn, StatusChange, decode
from streamtx.records.txnstate import EndReason, TxnState
from streamtx.service.inprocess import Call
from tests.integration.coordinator.conftest import TOPIC, ClientFactory, TcFactory, workers_settings

pytestmark = pytest.mark.parametrize("tc_workers", [2], indirect=True)

P0 = f"{TOPIC}-partition-0"


async def test_a_request_applied_by_a_dead_owner_is_answered_from_the_log(
        file_url: str, tc_factory: TcFactory, client_factory: ClientFactory, redis_url: str) -> None:
    settings: dict[str, Any] = workers_settings(2, redis_url)
    cluster = settings["cluster"]
    txn, request_id = TxnId.of(0, 1), uuid.uuid4().hex
    now = int(time.time() * 1000)
    ledgers = open_ledger_factory(file_url)
    txn_log = await TransactionLog.open(ledgers, cluster=cluster, coordinator_id=0,
                                        batching=BatchingSettings())
    await txn_log.append(NewTxn(txn, 60_000, now))
    await txn_log.append(Forwarded(bytes.fromhex(request_id), AddPartitions(txn, (P0,))))
    await txn_log.append(StatusChange(txn, TxnState.ABORTING, EndReason.TIMEOUT, now))
    await txn_log.append(StatusChange(txn, TxnState.ABORTED, EndReason.TIMEOUT, now))
    await txn_log.close()
    r = aredis.Redis.from_url(redis_url)
    try:
        key = f"streamtx:{cluster}:coordinator:mailbox:0"
        reply = f"streamtx:{cluster}:coordinator:reply:{request_id}"
        call = Call("POST", f"/v1/transactions/{txn}/partitions", b"",
                    [(b"content-type", b"application/json"), (REQUEST_ID, request_id.encode())],
                    orjson.dumps({"partitions": [P0]}))
        await r.xgroup_create(key, "owner", id="0", mkstream=True)
        await r.xadd(key, encode_call(call, reply, now + 60_000))  # type: ignore[arg-type]
        assert await r.xreadgroup("owner", "tc-dead", {key: ">"}, count=1)  # read, never answered

        proc = tc_factory(file_url, **settings)
        got = await r.blpop([reply], timeout=30)
        assert got is not None, proc.log_tail()
        answer = decode_answer(got[1])
        assert answer.status == 200, answer.body
        body = orjson.loads(answer.body)
        assert body["state"] == "ABORTED" and body["partitions"] == [P0], body

        # Live: what the owners append serving mailbox requests carries the request's id.
        tc = client_factory(proc)
        for _ in range(8):
            created = await tc.create()
            await tc.add_partitions(created, [P0])
    finally:
        await r.aclose()
    proc.stop()
    tagged = 0
    for cid in (0, 1):
        ledger = await ledgers.open(f"txnlog/{cluster}/{cid}", writer=False)
        await ledger.refresh()
        for entry in await ledger.read(None, 10_000):
            tagged += sum(isinstance(decode(raw), Forwarded) for raw in decode_entry(entry.data))
        await ledger.close()
    await ledgers.close()
    assert tagged > 1  # the one laid down, and forwarded adds since
