"""Fixtures: a pending-ack store process on the file backend, and a recording fake broker."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from tests.support.procs import free_port
from tests.support.services import ServiceProcess


class FakeBroker:
    """Records ``POST /v1/txn/subscriptions/end`` calls; can fail the next ones with 503."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail_next = 0
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = FastAPI()

        @app.post("/v1/txn/subscriptions/end")
        async def end(body: dict[str, Any]) -> JSONResponse:
            if self.fail_next:
                self.fail_next -= 1
                return JSONResponse({"error": "unavailable", "message": "injected"}, status_code=503)
            self.calls.append(body)
            return JSONResponse({"status": "ok"})

        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def start(self) -> FakeBroker:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise TimeoutError("fake broker did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)


@pytest.fixture
def fake_broker() -> Iterator[FakeBroker]:
    broker = FakeBroker().start()
    yield broker
    broker.stop()


@pytest.fixture
def pendingack(tmp_path: Path, fake_broker: FakeBroker) -> Iterator[ServiceProcess]:
    proc = ServiceProcess("pendingack", {
        "STREAMTX_LEDGER_URL": f"file://{tmp_path / 'ledgers'}",
        "STREAMTX_BROKER_URL": fake_broker.url,
        "STREAMTX_BROKER_END_TIMEOUT_S": "5",
        "STREAMTX_TEST_LOG_DIR": str(tmp_path),
    }).start()
    yield proc
    proc.stop()
