"""``python -m streamtx.coordinator``: run the transaction coordinator."""

from __future__ import annotations

from streamtx.coordinator.app import create_coordinator_app
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.service import serve


def main() -> None:
    settings = CoordinatorSettings()  # invalid settings stop the start with pydantic's message
    serve(create_coordinator_app(settings), settings.host, settings.port)


if __name__ == "__main__":
    main()
