"""Dependencies of the broker's routes, as ``Annotated`` aliases.

Async on purpose: FastAPI runs a sync dependency in a worker thread per request.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from starlette.datastructures import State

from streamtx import names
from streamtx.broker.registry import Broker
from streamtx.broker.settings import BrokerSettings
from streamtx.errors import UnavailableError


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
