"""Dependencies of the controller's routes, as ``Annotated`` aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from streamtx.errors import UnavailableError
from streamtx.replication.controller import Controller


async def get_controller(request: Request) -> Controller:
    controller: Controller | None = getattr(request.app.state, "controller", None)
    if controller is None:
        raise UnavailableError("the replication controller is starting")
    return controller


ControllerDep = Annotated[Controller, Depends(get_controller)]
