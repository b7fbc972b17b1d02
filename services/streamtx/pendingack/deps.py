"""Dependencies of the routes, as ``Annotated`` aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from starlette.datastructures import State

from streamtx.pendingack.registry import PendingAckStores

#: The body of a plain success answer.
OK = b'{"status":"ok"}'


def stores_of(state: State) -> PendingAckStores:
    stores: PendingAckStores = state.stores
    return stores


def _stores(request: Request) -> PendingAckStores:
    return stores_of(request.app.state)


Stores = Annotated[PendingAckStores, Depends(_stores)]
