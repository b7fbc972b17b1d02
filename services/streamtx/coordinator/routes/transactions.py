"""The transaction API (docs/api.md, "Transaction coordinator")."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field, ValidationError

from streamtx.contracts.body import StrictBody
from streamtx.coordinator.deps import OwnedTxnDep, TxnPath
from streamtx.coordinator.registry import Coordinators
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.errors import MalformedError
from streamtx.names import PartitionName, SubscriptionName, TopicName
from streamtx.records.txnlog import Subscription
from streamtx.records.txnstate import Action
from streamtx.records.txntable import TxnMeta
from streamtx.service import HotRequest, HotRoutes
from streamtx.service.auth import PrincipalDep, check_tenants
from streamtx.service.fastlane import first_error
from streamtx.service.openapi import responses

router = APIRouter(prefix="/v1/transactions", tags=["transactions"])
hot = HotRoutes(router)  # served by the fast lane too (streamtx.service.fastlane)

_max_items = 1000  # per request


class TxnCreate(StrictBody):
    """Request of POST /v1/transactions; no timeout means the configured default."""

    # le: the default STREAMTX_MAX_TIMEOUT_MS (a larger one is a 400; a service configured with
    # another maximum answers by its own).
    timeout_ms: int | None = Field(None, ge=1, le=CoordinatorSettings.model_fields["max_timeout_ms"].default,
                                   description="abort the transaction this long after opening")



class TxnCreated(BaseModel):
    """Response of POST /v1/transactions."""

    txn_id: str


class PartitionsAdd(StrictBody):
    """Partitions to register before producing to them in the transaction."""

    # Partition names only (x-partition-N): a topic's name registered here was ended on the broker
    # with 400 for ever, its transaction stuck in COMMITTING (issue 21 item 4).
    partitions: list[PartitionName] = Field(min_length=1, max_length=_max_items)


class SubscriptionRef(StrictBody):
    """A subscription on a topic (or partition)."""

    topic: TopicName
    subscription: SubscriptionName


class SubscriptionsAdd(StrictBody):
    """Subscriptions to register before acknowledging on them in the transaction."""

    subscriptions: list[SubscriptionRef] = Field(min_length=1, max_length=_max_items)


class TxnPublic(BaseModel):
    """A transaction as clients see it; times are wall-clock ms since the epoch."""

    txn_id: str
    state: str
    partitions: list[str]
    subscriptions: list[SubscriptionRef]
    opened_at: int
    timeout_at: int
    timeout_ms: int
    # The subject that opened it ("" without auth): a participant (broker, pending-ack store)
    # accepts a produce or ack in the transaction from that client only (streamtx.peers.txnguard).
    owner: str = ""


class TxnEnded(BaseModel):
    """Response of commit and abort: the final state."""

    txn_id: str
    state: str


def public(meta: TxnMeta) -> TxnPublic:
    return TxnPublic(
        txn_id=str(meta.txn),
        state=meta.state.name,
        partitions=list(meta.partitions),
        subscriptions=[
            SubscriptionRef(topic=s.topic, subscription=s.subscription) for s in meta.subscriptions
        ],
        opened_at=meta.opened_at_ms,
        timeout_at=meta.timeout_at_ms,
        timeout_ms=meta.timeout_ms,
        owner=meta.owner,
    )


@hot.post("", body=TxnCreate, body_required=False, response_model=TxnCreated,
          openapi_extra=responses(429))  # the client's open-transaction limit
async def create_transaction(request: HotRequest) -> bytes:
    """Open a transaction (durable when answered); no body or no timeout_ms: the default."""
    raw = request.body
    try:
        body = TxnCreate.model_validate_json(raw) if raw.strip() else None
    except ValidationError as exc:
        raise MalformedError(f"body: {first_error(exc)}") from None
    coordinators: Coordinators = request.state.coordinators
    settings: CoordinatorSettings = request.state.settings
    timeout_ms = settings.default_timeout_ms if body is None or body.timeout_ms is None else body.timeout_ms
    if timeout_ms > settings.max_timeout_ms:
        raise MalformedError(f"timeout_ms {timeout_ms} exceeds the maximum {settings.max_timeout_ms}")
    owner = request.principal.subject if request.principal is not None else ""
    meta = await coordinators.pick().create(timeout_ms, owner)
    return b'{"txn_id":"%d:%d"}' % meta.txn


def _tenant(topic: str) -> str:
    return topic.removeprefix("persistent://").split("/", 1)[0]


@router.get("/{txn}", response_model=TxnPublic)
async def get_transaction(coordinator: OwnedTxnDep, txn: TxnPath) -> TxnPublic:
    """A transaction's state and participants."""
    return public(coordinator.get(txn))


@router.post("/{txn}/partitions", response_model=TxnPublic)
async def add_partitions(
    coordinator: OwnedTxnDep, txn: TxnPath, body: PartitionsAdd, principal: PrincipalDep
) -> TxnPublic:
    """Register partitions with the transaction (idempotent); 409 unless it is open."""
    check_tenants(principal, {_tenant(p) for p in body.partitions})
    return public(await coordinator.add_partitions(txn, body.partitions))


@router.post("/{txn}/subscriptions", response_model=TxnPublic)
async def add_subscriptions(
    coordinator: OwnedTxnDep, txn: TxnPath, body: SubscriptionsAdd, principal: PrincipalDep
) -> TxnPublic:
    """Register subscriptions with the transaction (idempotent); 409 unless it is open."""
    check_tenants(principal, {_tenant(s.topic) for s in body.subscriptions})
    subs = [Subscription(s.topic, s.subscription) for s in body.subscriptions]
    return public(await coordinator.add_subscriptions(txn, subs))


@router.post("/{txn}/commit", response_model=TxnEnded)
async def commit(coordinator: OwnedTxnDep, txn: TxnPath) -> TxnEnded:
    """Commit; answers once every participant committed. 409 when aborting/aborted/timed out
    or when a subscription reports an overlapping commit (the transaction is then aborted)."""
    state = await coordinator.end(txn, Action.COMMIT)
    return TxnEnded(txn_id=str(txn), state=state.name)


@router.post("/{txn}/abort", response_model=TxnEnded)
async def abort(coordinator: OwnedTxnDep, txn: TxnPath) -> TxnEnded:
    """Abort; answers once every participant aborted. 409 when committing or committed."""
    state = await coordinator.end(txn, Action.ABORT)
    return TxnEnded(txn_id=str(txn), state=state.name)
