"""``python -m streamtx.replication``: run the replication controller."""

from streamtx.replication.app import build_app
from streamtx.replication.settings import ReplicationSettings
from streamtx.service import serve

settings = ReplicationSettings.from_env()
serve(build_app(settings), settings.host, settings.port)
