"""How every service starts: ``python -m streamtx.<service>`` calls :func:`run_service`.

Settings come from ``STREAMTX_*`` variables through the service's one settings
class (bad ones stop the process with a message naming them), the app is built
by the service's ``build_app(settings)`` and served in this process or in
``STREAMTX_WORKERS`` worker processes (:mod:`streamtx.service.workers`), each
with the same uvicorn options (:mod:`streamtx.service.serve`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

from fastapi import FastAPI
from pydantic import ValidationError

from streamtx.service import startclock
from streamtx.service.settings import ServiceSettings
from streamtx.service.workers import serve_app

S = TypeVar("S", bound=ServiceSettings)


def settings_errors(name: str, settings_class: type[ServiceSettings], exc: ValidationError) -> list[str]:
    """One line per bad setting, naming its environment variable (pydantic's own report is
    several lines each, and says nothing of ``STREAMTX_``)."""
    prefix = settings_class.model_config.get("env_prefix") or ""
    nested = settings_class.model_config.get("env_nested_delimiter") or "__"
    lines = []
    for error in exc.errors():
        field = [str(p) for p in error["loc"]]
        what = (f"{prefix}{nested.join(field).upper()} ({'.'.join(field)})" if field
                else f"{prefix}* settings")
        message = str(error["msg"]).removeprefix("Value error, ")
        lines.append(f"streamtx {name}: invalid setting {what}: {message}")
    return lines


def run_service(name: str, settings_class: type[S], build_app: Callable[[S], FastAPI], *,
                base_member: Callable[[S], str] | None = None) -> None:
    """Read ``settings_class`` from the environment, build the app, serve it until stopped.

    ``STREAMTX_WORKERS`` > 1 (services that lease their logs) serves it from that many
    processes on the port (:mod:`streamtx.service.workers`); ``base_member`` names them.
    """
    startclock.mark("imported")  # python -m streamtx.<service> imported the app to get here
    try:
        settings = settings_class()  # type: ignore[call-arg]  # fields from the environment
    except ValidationError as exc:
        sys.exit("\n".join(settings_errors(name, settings_class, exc)))
    serve_app(build_app, settings, base_member=base_member(settings) if base_member else "")
