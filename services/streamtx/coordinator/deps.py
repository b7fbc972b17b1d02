"""Dependency aliases, so route signatures read like type lists."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from streamtx.coordinator.registry import Coordinators
from streamtx.coordinator.txnid import TxnId

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
