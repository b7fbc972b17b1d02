"""``python -m streamtx.replication``: run the replication controller (the start-up of every service)."""

from __future__ import annotations

from streamtx.replication.app import build_app
from streamtx.replication.settings import ReplicationSettings
from streamtx.service.run import run_service


def main() -> None:
    run_service("replication", ReplicationSettings, build_app)


if __name__ == "__main__":
    main()
