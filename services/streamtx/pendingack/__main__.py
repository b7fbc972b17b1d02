"""``python -m streamtx.pendingack``: run the pending-ack store."""

from streamtx.pendingack.app import build_app
from streamtx.pendingack.settings import PendingAckSettings
from streamtx.service import serve

settings = PendingAckSettings.from_env()
serve(build_app(settings), settings.host, settings.port)
