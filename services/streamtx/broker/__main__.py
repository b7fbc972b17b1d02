"""``python -m streamtx.broker``: run the partition broker."""

from __future__ import annotations

from streamtx.broker.app import build_app
from streamtx.broker.settings import BrokerSettings
from streamtx.service import serve


def main() -> None:
    settings = BrokerSettings()  # type: ignore[call-arg]  # read from the environment
    serve(build_app(settings), settings.host, settings.port)


if __name__ == "__main__":
    main()
