"""``python -m streamtx.coordinator``: run the transaction coordinator (``STREAMTX_WORKERS``
processes on its port, one by default)."""

from __future__ import annotations

from streamtx.service import workermetrics

workermetrics.prepare()  # before prometheus_client is imported: workers share their metrics

from streamtx.coordinator.app import build_app  # noqa: E402
from streamtx.coordinator.settings import CoordinatorSettings  # noqa: E402
from streamtx.service.run import run_service  # noqa: E402


def main() -> None:
    run_service("coordinator", CoordinatorSettings, build_app, base_member=lambda s: s.member)


if __name__ == "__main__":
    main()
