"""``python -m streamtx.pendingack``: run the pending-ack store (the same start-up as every service)."""

from __future__ import annotations

from streamtx.pendingack.app import build_app
from streamtx.pendingack.settings import PendingAckSettings
from streamtx.service.run import run_service


def main() -> None:
    run_service("pendingack", PendingAckSettings, build_app)


if __name__ == "__main__":
    main()
