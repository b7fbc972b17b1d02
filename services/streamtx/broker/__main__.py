"""``python -m streamtx.broker``: run the partition broker (the same start-up as every service)."""

from __future__ import annotations

from streamtx.broker.app import build_app
from streamtx.broker.settings import BrokerSettings
from streamtx.service.run import run_service


def main() -> None:
    run_service("broker", BrokerSettings, build_app)


if __name__ == "__main__":
    main()
