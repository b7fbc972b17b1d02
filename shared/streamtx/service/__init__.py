"""What every streamtx service shares: settings base, error mapping, common routes,
the fast lane for hot routes, and a uvicorn runner. Calls between services go
through :mod:`streamtx.transport`.

The names below are imported when first asked for (PEP 562), not with the package: a
process that needs one light module of it (a demo worker: the gc settings, the start
clock, readiness) does not import FastAPI and uvicorn with it (issue 25: half of a
restarted worker's imports)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamtx.service.app import ServiceState, create_app, include_hot
    from streamtx.service.fastlane import HotRequest, HotRoutes
    from streamtx.service.serve import serve
    from streamtx.service.settings import ServiceSettings

_where = {
    "ServiceState": "app", "create_app": "app", "include_hot": "app",
    "HotRequest": "fastlane", "HotRoutes": "fastlane",
    "serve": "serve",
    "ServiceSettings": "settings",
}

__all__ = ["HotRequest", "HotRoutes", "ServiceSettings", "ServiceState", "create_app",
           "include_hot", "serve"]


def __getattr__(name: str) -> Any:
    module = _where.get(name)
    if module is None:  # a submodule (``from streamtx.service import startclock``) is imported as usual
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
