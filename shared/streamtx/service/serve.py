"""Serving one app with uvicorn: the options, logging and garbage-collector tuning every
service process uses (in-process, or in each worker of :mod:`streamtx.service.workers`)."""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import logging
import socket
from types import FrameType
from typing import Any, Literal

import uvicorn
from fastapi import FastAPI

from streamtx.service.connguard import ConnectionLimits, guarded_h11, guarded_httptools
from streamtx.service.longpoll import LongPolls
from streamtx.service.settings import ServiceSettings
from streamtx.service.shutdown import Watchdog

#: The services' log lines (the pid tells workers of one port apart).
LOG_FORMAT = "%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"

#: How long uvicorn lets open requests finish after a stop signal.
GRACEFUL_S = 5
_WATCHDOG_MARGIN_S = 5.0

#: gc thresholds of every service (CPython's default is 700, 10, 10).
GC_THRESHOLDS = (20_000, 20, 50)


#: Libraries whose INFO lines are noise in a service's log: httpx logs every request
#: (a service's calls of its peers: 244 lines in a 20 s demo at 300 records/s).
QUIET_LOGGERS = ("httpx", "httpcore")


def configure_logging() -> None:
    """The services' log set-up: INFO, one format, the :data:`QUIET_LOGGERS` at WARNING."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def tune_gc() -> None:
    """Fewer, cheaper garbage collections: the services' tail latency was theirs.

    A service allocates (and frees, by reference counting) a container per message
    and per id. With CPython's default thresholds the broker ran a full collection
    about twice a second under the demo's load, each scanning every live object:
    1.9 s of 25 s, pauses up to 54 ms (176 ms in the pending-ack store). Freezing
    what start-up built (modules, the app) keeps it out of every scan, and a larger
    young generation collects far less often: no full collection in a 30 s run, and
    the demo's end-to-end p99 went from 0.9-1.0 s to about 0.8 s. Cycles are still
    collected, just in larger batches.
    """
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class _Server(uvicorn.Server):
    """uvicorn, ending the app's long polls as soon as a stop signal arrives.

    uvicorn waits for open requests (up to ``timeout_graceful_shutdown``)
    before the lifespan's shutdown runs, so ending them there would be too late:
    a fetch waiting 30 s kept Ctrl-C waiting, then was cancelled with a traceback.
    """

    def __init__(self, config: uvicorn.Config, polls: LongPolls, watchdog: Watchdog) -> None:
        super().__init__(config)
        self._polls = polls
        self._watchdog = watchdog
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._watchdog.arm()
        if self._loop is not None:  # a signal handler: hand it to the loop
            self._loop.call_soon_threadsafe(self._polls.end_all)
        super().handle_exit(sig, frame)


def http_options(http: Literal["auto", "httptools", "h11"], settings: object) -> dict[str, Any]:
    """uvicorn's ``http`` protocol under the service's connection limits (connguard.py)."""
    limits = ConnectionLimits()
    if isinstance(settings, ServiceSettings):
        limits = ConnectionLimits(settings.max_header_bytes, settings.max_headers,
                                  settings.request_head_timeout_s, settings.request_body_timeout_s)
    if http == "h11" or importlib.util.find_spec("httptools") is None:
        return {"http": guarded_h11(limits)}
    return {"http": guarded_httptools(limits)}


def serve(app: FastAPI, host: str, port: int, sock: socket.socket | None = None, *,
          loop: Literal["auto", "uvloop", "asyncio"] = "auto",
          http: Literal["auto", "httptools", "h11"] = "auto") -> None:
    """Serve ``app`` until SIGINT/SIGTERM, on ``host:port`` or on ``sock`` (bound by the caller);
    ``loop`` and ``http``: uvicorn's event loop and HTTP parser (``STREAMTX_SERVER_LOOP``/``_HTTP``)."""
    tune_gc()
    configure_logging()
    # No proxy-header rewriting: no service reads the client address.
    settings = getattr(app.state, "settings", None)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            proxy_headers=False, server_header=False,
                            timeout_graceful_shutdown=GRACEFUL_S, loop=loop, **http_options(http, settings))
    # Open requests get GRACEFUL_S, then the app's shutdown its own bound (create_app): past
    # both and a margin, the process is ended whatever it is stuck in.
    shutdown_s = settings.shutdown_timeout_s if isinstance(settings, ServiceSettings) else 10.0
    watchdog = Watchdog(GRACEFUL_S + shutdown_s + _WATCHDOG_MARGIN_S)
    try:
        polls = getattr(app.state, "long_polls", None)
        if polls is None:  # a bare FastAPI app (bench-tc's baseline) has none to end
            polls = LongPolls()
        _Server(config, polls, watchdog).run(sockets=None if sock is None else [sock])
    except KeyboardInterrupt:
        # uvicorn re-raises a Ctrl-C once it has stopped cleanly; asyncio's runner
        # turns that into KeyboardInterrupt. Nothing is left to do: exit quietly.
        pass
