"""What every streamtx service shares: settings base, error mapping, common routes,
inter-service HTTP with retries, and a uvicorn runner."""

from streamtx.service.app import ServiceState, create_app
from streamtx.service.http import ServiceClient
from streamtx.service.run import serve
from streamtx.service.settings import ServiceSettings

__all__ = ["ServiceClient", "ServiceSettings", "ServiceState", "create_app", "serve"]
