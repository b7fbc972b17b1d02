"""The histograms job reads every transaction-log record version the coordinator writes (issue 22 item 7).

Pure (no Spark): :func:`streamtx.jobs.aggregate.aggregate_task` over one
entry of records made with the shared codec. A NEW record carries the opener's
subject when auth is on; the job unpacked NEW as exactly 34 bytes and crashed
(``struct.error: unpack requires a buffer of 34 bytes``) on every log written
with auth on.
"""

from __future__ import annotations

import pytest

from streamtx.batching.codec import encode_batch
from streamtx.contracts.txnid import TxnId
from streamtx.errors import CorruptEntryError
from streamtx.jobs import aggregate
from streamtx.jobs.sources import TXNLOG, LedgerRef, Split, Task
from streamtx.records import txnlog as tc
from streamtx.records.txnstate import EndReason, TxnState

REF = LedgerRef("file:///x", "txnlog/c1/0", TXNLOG, (("cluster", "c1"), ("coordinator_id", "0")))
TASK = Task(Split(REF, 0, 0, 1), 0, 0, 1)


def _counts(records: list[tc.Record]) -> dict[str, float]:
    pairs = dict(aggregate.aggregate_task(TASK, [(0, encode_batch([tc.encode(r) for r in records]))],
                                          None, None))
    # Transactions not ended in this task are partials the driver finishes.
    pairs.update(aggregate.finish_txns([(k, v) for k, v in pairs.items() if k[0] == "t"], None, None))
    return {dict(k[2])["state"]: v[0] for k, v in pairs.items() if k[0] == "c" and k[1] == "txns"}


@pytest.mark.parametrize("owner", ["", "app-a", "ü" * 300], ids=["auth-off", "auth-on", "long-owner"])
def test_every_record_version_is_read(owner: str) -> None:
    a, b, c, d = (TxnId.of(0, i) for i in range(4))
    rid = bytes(range(16))
    records: list[tc.Record] = [
        tc.ReserveIds(10_000),
        tc.NewTxn(a, 60_000, 1_000, owner),
        tc.Forwarded(rid, tc.NewTxn(b, 60_000, 1_000, owner)),
        tc.NewTxn(c, 60_000, 1_000, owner),
        tc.NewTxn(d, 60_000, 1_000, owner),
        tc.AddPartitions(a, ("persistent://public/default/t-partition-0",)),
        tc.AddSubscriptions(a, (tc.Subscription("persistent://public/default/t-partition-0", "s"),)),
        tc.StatusChange(a, TxnState.COMMITTING, EndReason.CLIENT, 1_500),
        tc.StatusChange(a, TxnState.COMMITTED, EndReason.CLIENT, 2_000),
        tc.Forwarded(rid, tc.StatusChange(b, TxnState.ABORTING, EndReason.CLIENT, 1_500)),
        tc.Forwarded(rid, tc.StatusChange(b, TxnState.ABORTED, EndReason.CLIENT, 3_000)),
        tc.StatusChange(c, TxnState.ABORTING, EndReason.TIMEOUT, 61_000),
    ]
    assert _counts(records) == {"COMMITTED": 1, "ABORTED": 1, "ENDING": 1, "OPEN": 1}


@pytest.mark.parametrize("owner", ["", "app-a"])
def test_txn_event_reads_the_head_of_new_and_status(owner: str) -> None:
    t = TxnId.of(2, 5)
    assert tc.txn_event(tc.encode(tc.NewTxn(t, 1, 77, owner))) == ((t.most, t.least), 77, None)
    status = tc.encode(tc.StatusChange(t, TxnState.TIMEOUT, EndReason.TIMEOUT, 88))
    assert tc.txn_event(status) == ((t.most, t.least), 88, TxnState.TIMEOUT)
    assert tc.txn_event(tc.encode(tc.ReserveIds(5))) is None
    for bad in (b"\x09\x01", b"\x01\x02" + bytes(32), b"\x01\x01\x00"):
        with pytest.raises(CorruptEntryError):
            tc.txn_event(bad)
