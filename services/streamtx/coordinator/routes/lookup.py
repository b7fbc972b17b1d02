"""Coordinator lookup: which replica owns a coordinator id (and so its transactions).

The coordinator id is the top 16 bits of every transaction id, so a client that
knows a transaction knows which id to look up; Pulsar's topic lookup
(``/lookup/v2/topic/...``) answers the same question for partitions.
"""

from __future__ import annotations

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel

from streamtx.contracts.txnid import max_coordinator_id
from streamtx.coordinator import leases as replicas
from streamtx.coordinator.deps import CoordinatorsDep
from streamtx.errors import NotFoundError

router = APIRouter(prefix="/lookup/v2", tags=["lookup"])


class CoordinatorOwner(BaseModel):
    """Answer of a coordinator lookup."""

    coordinatorId: int
    owner: str | None  # the owner's URL; null while the id moves between replicas
    servedHere: bool


@router.get("/coordinator/{coordinator_id}", response_model=CoordinatorOwner)
async def lookup_coordinator(
    request: Request, coordinators: CoordinatorsDep,
    coordinator_id: int = Path(ge=0, le=max_coordinator_id),
) -> CoordinatorOwner:
    if coordinator_id not in coordinators.all_ids:
        raise NotFoundError(f"coordinator {coordinator_id} is not configured (ids: {coordinators.all_ids})")
    if coordinator_id in coordinators.ids:
        return CoordinatorOwner(coordinatorId=coordinator_id, servedHere=True,
                                owner=replicas.advertised_url(request.app.state.settings))
    return CoordinatorOwner(coordinatorId=coordinator_id, owner=coordinators.owners.get(coordinator_id),
                            servedHere=False)
