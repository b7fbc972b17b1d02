"""Dependency aliases, so route signatures read like type lists."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from streamtx.auth.policy import check_owner
from streamtx.contracts.txnid import TxnId
from streamtx.coordinator.coordinator import TransactionCoordinator
from streamtx.coordinator.registry import Coordinators
from streamtx.service.auth import PrincipalDep

# Every dependency is async: FastAPI runs a plain `def` one in a worker thread,
# a thread hop per request on the hot path.


async def get_coordinators(request: Request) -> Coordinators:
    coordinators: Coordinators = request.app.state.coordinators
    return coordinators


async def txn_from_path(txn: str) -> TxnId:
    """The ``{txn}`` path parameter, ``"{most}:{least}"``; 400 when malformed."""
    return TxnId.parse(txn)


CoordinatorsDep = Annotated[Coordinators, Depends(get_coordinators)]
TxnPath = Annotated[TxnId, Depends(txn_from_path)]


async def owned_txn(
    coordinators: CoordinatorsDep, txn: TxnPath, principal: PrincipalDep
) -> TransactionCoordinator:
    """The ``{txn}``'s coordinator, once the caller may touch the transaction: its owner, a
    service or an admin (403 otherwise, before the body is even read)."""
    coordinator = coordinators.owner(txn)
    # Unknown (or not yet replayed) transactions are left to the operation's own 404/503.
    if principal is not None and (meta := coordinator.table.get(txn)) is not None:
        check_owner(principal, meta.owner, f"transaction {txn}")
    return coordinator


OwnedTxnDep = Annotated[TransactionCoordinator, Depends(owned_txn)]
