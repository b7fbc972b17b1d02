"""What every streamtx service shares: settings base, error mapping, common routes,
the fast lane for hot routes, and a uvicorn runner (:func:`streamtx.service.serve.serve`).
Calls between services go through :mod:`streamtx.transport`.

The names below load on first use (PEP 562), not with the package: a service's
``__main__`` imports :mod:`streamtx.service.workermetrics` and must set the
metrics directory before anything imports prometheus_client (the app does)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamtx.service.app import ServiceState, create_app, include_hot
    from streamtx.service.fastlane import HotRequest, HotRoutes
    from streamtx.service.settings import ServiceSettings

_homes = {
    "ServiceState": "app", "create_app": "app", "include_hot": "app",
    "HotRequest": "fastlane", "HotRoutes": "fastlane",
    "ServiceSettings": "settings",
}

# Not ``serve``: the submodule of that name shadows it once imported (import it from there).
__all__ = ["HotRequest", "HotRoutes", "ServiceSettings", "ServiceState", "create_app",
           "include_hot"]


def __getattr__(name: str) -> Any:
    home = _homes.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
