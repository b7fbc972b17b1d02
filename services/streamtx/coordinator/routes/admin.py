"""The coordinator's part of the admin v3 API (mirrors Pulsar's ``/admin/v3/transactions``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from streamtx.contracts.body import StrictBody
from streamtx.contracts.txnid import TxnId
from streamtx.coordinator.coordinator import TransactionCoordinator
from streamtx.coordinator.deps import CoordinatorsDep
from streamtx.coordinator.registry import Coordinators
from streamtx.errors import MalformedError
from streamtx.records.txnstate import TxnState
from streamtx.records.txntable import TxnMeta

router = APIRouter(prefix="/admin/v3/transactions", tags=["admin"])


class BatchLogSwitch(StrictBody):
    """Request of POST tcBatchLog: batched transaction-log writes on or off."""

    enabled: bool


def metadata(meta: TxnMeta) -> dict[str, Any]:
    """Pulsar's TransactionMetadata, with the participants as the TC knows them."""
    acked: dict[str, list[str]] = {}
    for sub in meta.subscriptions:
        acked.setdefault(sub.topic, []).append(sub.subscription)
    return {
        "txnId": str(meta.txn),
        "status": meta.state.name,
        "pendingEnd": None if meta.pending is None else meta.pending.name,
        "openTimestamp": meta.opened_at_ms,
        "timeoutAt": meta.timeout_at_ms,
        "timeoutMs": meta.timeout_ms,
        "endedAt": meta.ended_at_ms or None,
        "producedPartitions": list(meta.partitions),
        "ackedPartitions": acked,
    }


def coordinator_stats(tc: TransactionCoordinator) -> dict[str, Any]:
    table = tc.table
    unfinished = [m.txn.counter for m in table.txns.values() if not m.state.is_final]
    next_counter = tc.next_counter
    # Every id at or below the low-water mark is finished (Pulsar's lowWaterMark).
    low = (min(unfinished) if unfinished else next_counter) - 1
    return {
        "state": tc.status,
        "leastSigBits": next_counter - 1,
        "lowWaterMark": low,
        "ongoingTxnSize": table.active,
        "recoverStartTime": tc.recover_started_ms,
        "recoverEndTime": tc.recover_ended_ms,
        "recoverTime": tc.recover_ended_ms - tc.recover_started_ms,
        "batchedWriteEnabled": tc.log.batching_enabled,
    }


@router.get("/coordinatorStats")
async def coordinator_stats_all(coordinators: CoordinatorsDep) -> dict[str, Any]:
    """Per coordinator id: state, leastSigBits, lowWaterMark, ongoingTxnSize, recover times."""
    return {str(tc.coordinator_id): coordinator_stats(tc) for tc in coordinators}


@router.get("/coordinatorInternalStats/{coordinator_id}")
async def coordinator_internal_stats(coordinators: CoordinatorsDep,
                                     coordinator_id: Annotated[int, Path(ge=0, le=0xFFFF)]) -> dict[str, Any]:
    """The transaction log's storage: its ledgers (segments) with entries and size, and its cursor."""
    tc = coordinators.by_id(coordinator_id)
    cursor = tc.log.cursor.stats()
    return {
        "transactionLogStats": {
            "managedLedgerName": tc.log.name,
            "ledgers": [
                {"ledgerId": s.segment_id, "entries": s.entries, "size": s.size} for s in tc.log.stats()
            ],
            "cursor": {
                "name": cursor.name,
                "markDeletePosition": None if cursor.mark_delete is None else str(cursor.mark_delete),
                "individuallyDeletedRanges": cursor.individually_deleted_ranges,
                "partiallyDeletedBatches": cursor.partially_deleted_batches,
            },
            "liveTransactions": len(tc.table.txns),
        }
    }


@router.get("/transactionMetadata/{most}/{least}")
async def transaction_metadata(coordinators: CoordinatorsDep, most: str, least: str) -> dict[str, Any]:
    """One transaction's metadata."""
    txn = TxnId.parse(f"{most}:{least}")
    return metadata(coordinators.owner(txn).get(txn))


@router.get("/slowTransactions/{timeout_ms}")
async def slow_transactions(coordinators: CoordinatorsDep,
                            timeout_ms: Annotated[int, Path(ge=0)]) -> dict[str, Any]:
    """Open transactions opened longer than ``timeout_ms`` ago, by id."""
    if timeout_ms < 0:
        raise MalformedError("timeout_ms must be >= 0")
    out: dict[str, Any] = {}
    for tc in coordinators:
        now = tc.now_ms()
        for meta in list(tc.table.txns.values()):
            if meta.state is TxnState.OPEN and now - meta.opened_at_ms > timeout_ms:
                out[str(meta.txn)] = metadata(meta)
    return out


@router.get("/protocolViolations")
async def protocol_violations(coordinators: CoordinatorsDep) -> dict[str, Any]:
    """Transactions a participant had ended the other way (it answered the end with 409), by id.

    Each: its final state here and, per participant, the action asked, its answer and
    when. Kept in memory, the latest ones per coordinator (``max_violations_kept``).
    """
    out: dict[str, Any] = {}
    for tc in coordinators:
        for txn, (final, violations) in tc.violations.items():
            out[str(txn)] = {"status": final.name, "violations": [v.as_json() for v in violations]}
    return out


def batch_log_stat(coordinators: Coordinators) -> dict[str, Any]:
    flags = [(tc.coordinator_id, tc.log.batching_enabled) for tc in coordinators]
    return {
        "txnTcBatchLogEnabled": bool(flags) and all(enabled for _, enabled in flags),
        "coordinatorArray": [{str(cid): enabled} for cid, enabled in flags],
    }


@router.post("/tcBatchLog")
async def set_tc_batch_log(
    coordinators: CoordinatorsDep,
    body: BatchLogSwitch,
    coordinator_id: int | None = Query(None, ge=0, le=0xFFFF,
                                       description="only this coordinator (default: all)"),
) -> dict[str, Any]:
    """Switch batched transaction-log writes at run time (until restart), for all or one."""
    targets = list(coordinators) if coordinator_id is None else [coordinators.by_id(coordinator_id)]
    for tc in targets:
        tc.log.set_batching(body.enabled)
    return batch_log_stat(coordinators)


@router.get("/tcBatchLogStat")
async def tc_batch_log_stat(coordinators: CoordinatorsDep) -> dict[str, Any]:
    """``{"txnTcBatchLogEnabled": all on, "coordinatorArray": [{"<id>": on}]}``."""
    return batch_log_stat(coordinators)

