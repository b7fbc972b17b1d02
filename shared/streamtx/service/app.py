"""The FastAPI app every service starts from: errors, health, cluster, metrics, auth, fast lane."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import REGISTRY, CollectorRegistry, Gauge
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_fastapi_instrumentator import Instrumentator
from prometheus_fastapi_instrumentator import metrics as http_metrics

from streamtx.service import startclock, workermetrics
from streamtx.service.auth import authorizer
from streamtx.service.bodylimit import BodyLimit
from streamtx.service.errors import error_response, install_error_handlers
from streamtx.service.fastlane import FastLane, HotRoutes, LaneTable, observer
from streamtx.service.longpoll import LongPolls
from streamtx.service.openapi import install_openapi
from streamtx.service.query import one_value_each
from streamtx.service.settings import ServiceSettings
from streamtx.service.shutdown import bounded_exit
from streamtx.service.workermetrics import track

log = logging.getLogger(__name__)


class ServiceState:
    """Readiness flag shared by the lifespan and `/readyz`, and what else a ready service must pass."""

    def __init__(self) -> None:
        self.ready = False
        self.reason = "starting"
        # Each names why the service cannot serve now, or None (a ledger store out of file
        # descriptors, say: openfiles.py); asked by every /readyz, so a recovery shows at once.
        self.checks: list[Callable[[], Awaitable[str | None]]] = []
        self.failing: str | None = None  # what the last /readyz found (the ready gauge reads it)

    async def unready(self) -> str | None:
        """Why ``/readyz`` is not 200 now, or None."""
        if not self.ready:
            return self.reason
        self.failing = None
        for check in self.checks:
            if (why := await check()) is not None:
                self.failing = why
                break
        return self.failing


def create_app(
    *,
    title: str,
    settings: ServiceSettings,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]],
    state: ServiceState,
    redirects: bool = True,
) -> FastAPI:
    """A service app with the routes and handlers docs/api.md requires of every service."""
    polls = LongPolls()

    @contextlib.asynccontextmanager
    async def lifespan_ending_polls(app: FastAPI) -> AsyncIterator[None]:
        # Workers: this one's callback gauges reach its metrics file every second.
        syncing = asyncio.create_task(workermetrics.sync_forever()) if workermetrics.enabled() else None
        async with bounded_exit(lifespan(app), settings.shutdown_timeout_s, title):
            startclock.mark("started")
            # Once per process: how much of a restart was the interpreter and its imports, how
            # much the service's start-up (ledgers opened and replayed; docs/recovery.md).
            log.info("%s started %s", title, startclock.startup_line())
            if syncing is not None:
                # A worker listens once started (ready, for the coordinator's): its gauges reach
                # its file now, not at the next tick, or a scrape in between saw it not ready.
                workermetrics.sync()
            try:
                yield
            finally:  # (serve() ends them earlier, as soon as the stop signal arrives)
                polls.end_all()
                if syncing is not None:
                    syncing.cancel()

    # Metrics are Prometheus (below). FastAPI's native OpenTelemetry hook asks
    # the OTel API for its providers on every request even when none is set up:
    # about 8% of a small request's CPU, profiled.
    app = FastAPI(
        title=title, lifespan=lifespan_ending_polls,
        telemetry={"tracing": False, "metrics": False, "logs": False},
        dependencies=[Depends(one_value_each)],  # ?partition=1&partition=2: 400, not one of them
    )
    # The document lists the errors each operation really answers with (307 where logs move).
    install_openapi(app, moving=redirects)
    app.state.settings = settings
    app.state.service = state
    app.state.long_polls = polls
    install_error_handlers(app)
    authorize = authorizer(settings)

    # HTTP metrics go to a registry of this app so several apps can share a
    # process (tests); domain metrics live in the default registry. Only request
    # counts and latency: the library's default set (sizes, a second latency
    # histogram) cost about 10% of a small request's throughput, measured.
    http_registry = CollectorRegistry()
    instrumentator = Instrumentator(registry=http_registry, excluded_handlers=["/metrics"])
    instrumentator.add(http_metrics.requests(registry=http_registry))
    instrumentator.add(http_metrics.latency(registry=http_registry))
    # 1 while /readyz answers 200 (the "coordinator not ready" alert reads it;
    # the scrape adds the service label).
    # With workers: ready while every live worker is; long polls add up over them.
    track(Gauge("streamtx_service_ready", "1 while the service is ready (/readyz answers 200)", ["cluster"],
                registry=http_registry, multiprocess_mode="livemin").labels(settings.cluster),
          lambda: float(state.ready and state.failing is None))
    instrumentator.instrument(app)
    track(Gauge("streamtx_long_polls_open", "long-poll requests waiting now (fetches)",
                registry=http_registry, multiprocess_mode="livesum"), lambda: len(polls))
    # Added last, so it runs first: hot routes skip the layers above (fastlane.py), and
    # it checks every request's token (auth.py).
    app.state.fast_lane = LaneTable(enabled=settings.fast_lane)
    app.add_middleware(FastLane, table=app.state.fast_lane, state=app.state,
                       observe=observer(instrumentator), authorize=authorize)
    # Outermost of all: a body over the limit is refused before anything reads it.
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        body = workermetrics.latest(REGISTRY, http_registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> Response:
        why = await state.unready()
        if why is None:
            return JSONResponse({"status": "ready"})
        return error_response(503, "unavailable", why)

    @app.get("/v1/cluster")
    async def cluster() -> dict[str, Any]:
        return {"cluster": settings.cluster, "services": settings.services()}

    return app


def include_hot(app: FastAPI, routes: HotRoutes) -> None:
    """Include the hot routes' router (FastAPI serves and documents them) and put them in the fast lane."""
    app.include_router(routes.router)
    table: LaneTable = app.state.fast_lane
    table.add(routes)
