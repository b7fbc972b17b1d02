"""``python -m streamtx.coordinator``: run the transaction coordinator."""

from __future__ import annotations

import sys

from pydantic import ValidationError

from streamtx.coordinator.app import create_coordinator_app
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.service import serve


def main() -> None:
    try:
        # Fields come from STREAMTX_* variables (see settings.py).
        settings = CoordinatorSettings()  # type: ignore[call-arg]
    except ValidationError as exc:
        sys.exit(f"streamtx coordinator: invalid settings (STREAMTX_* environment):\n{exc}")
    serve(create_coordinator_app(settings), settings.host, settings.port)


if __name__ == "__main__":
    main()
