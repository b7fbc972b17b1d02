"""``python -m streamtx.coordinator``: run the transaction coordinator (``STREAMTX_WORKERS``
processes on its port, one by default)."""

from __future__ import annotations

from streamtx.coordinator.app import build_app
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.service.run import run_service


def main() -> None:
    run_service("coordinator", CoordinatorSettings, build_app, base_member=lambda s: s.member)


if __name__ == "__main__":
    main()
