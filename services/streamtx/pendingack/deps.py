"""Dependencies of the routes, as ``Annotated`` aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from streamtx.pendingack.stores import PendingAckStores


def _stores(request: Request) -> PendingAckStores:
    stores: PendingAckStores = request.app.state.stores
    return stores


Stores = Annotated[PendingAckStores, Depends(_stores)]
