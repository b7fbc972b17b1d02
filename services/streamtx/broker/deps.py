"""Dependencies of the broker's routes, as ``Annotated`` aliases.

Async on purpose: FastAPI runs a sync dependency in a worker thread per request.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from starlette.datastructures import State

from streamtx import names
from streamtx.auth import Principal
from streamtx.broker.registry import Broker
from streamtx.broker.settings import BrokerSettings
from streamtx.errors import ForbiddenError, UnavailableError
from streamtx.service.auth import principal_in


def broker_of(state: State) -> Broker:
    """The app's broker; 503 while the lifespan is still starting it."""
    broker: Broker | None = getattr(state, "broker", None)
    if broker is None:
        raise UnavailableError("broker is starting")
    return broker


async def get_broker(request: Request) -> Broker:
    return broker_of(request.app.state)


async def get_settings(request: Request) -> BrokerSettings:
    settings: BrokerSettings = request.app.state.settings
    return settings


BrokerDep = Annotated[Broker, Depends(get_broker)]
SettingsDep = Annotated[BrokerSettings, Depends(get_settings)]


# ``persistent://tenant/namespace/topic`` of path parameters, each checked (400) as Pulsar does.
topic_name = names.topic_name


def check_client_name(kind: str, name: str, principal: Principal | None) -> None:
    """403 for a reserved ``kind`` (producer, subscription) name unless a service or admin asks
    (issue 21 item 3): a client's producer ``pulsar.repl.<cluster>`` with a huge sequence made
    every later replicated write from that cluster a duplicate, and a client's subscription of
    that name shared the replicator's cursor. With auth off there is no service caller on these
    public paths at all (the replication controller writes and moves its cursor through the
    internal ``/v1/replication/...`` routes), so the names are refused to everyone there."""
    if names.is_reserved(name) and not (principal is not None and principal.trusted):
        raise ForbiddenError(f"{kind} name {name[:80]!r} is reserved for the services (names starting "
                             f"{' or '.join(map(repr, names.RESERVED_PREFIXES))}); only a service "
                             "token may use it")


async def not_reserved_subscription(request: Request, sub: str) -> None:
    """Route dependency: :func:`check_client_name` of the path's subscription."""
    check_client_name("subscription", sub, principal_in(request.scope))
