"""What every streamtx service shares: settings base, error mapping, common routes,
the fast lane for hot routes, and a uvicorn runner. Calls between services go
through :mod:`streamtx.transport`."""

from streamtx.service.app import ServiceState, create_app, include_hot
from streamtx.service.fastlane import HotRequest, HotRoutes
from streamtx.service.serve import serve
from streamtx.service.settings import ServiceSettings

__all__ = ["HotRequest", "HotRoutes", "ServiceSettings", "ServiceState", "create_app",
           "include_hot", "serve"]
