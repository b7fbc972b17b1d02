"""``python -m streamtx.coordinator``: run the transaction coordinator (``STREAMTX_WORKERS``
processes on its port, one by default)."""

from __future__ import annotations

import sys

from pydantic import ValidationError

from streamtx.coordinator.app import create_coordinator_app
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.service.workers import run_service


def main() -> None:
    try:
        # Fields come from STREAMTX_* variables (see settings.py).
        settings = CoordinatorSettings()  # type: ignore[call-arg]
    except ValidationError as exc:
        sys.exit(f"streamtx coordinator: invalid settings (STREAMTX_* environment):\n{exc}")
    run_service(create_coordinator_app, settings, base_member=settings.member)


if __name__ == "__main__":
    main()
