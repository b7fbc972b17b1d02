"""What every streamtx service shares: settings base, error mapping, common routes,
inter-service HTTP with retries, the fast lane for hot routes, and a uvicorn runner."""

from streamtx.service.app import ServiceState, create_app, include_hot
from streamtx.service.fastlane import HotRequest, HotRoutes
from streamtx.service.http import ServiceClient
from streamtx.service.run import serve
from streamtx.service.settings import ServiceSettings

__all__ = ["HotRequest", "HotRoutes", "ServiceClient", "ServiceSettings", "ServiceState", "create_app",
           "include_hot", "serve"]
