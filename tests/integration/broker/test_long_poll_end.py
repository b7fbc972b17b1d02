"""A long-poll fetch ends when its client disconnects and when the broker stops.

Before: a fetch slept its whole ``wait_ms`` (up to 30 s) after its client had
gone, and Ctrl-C (SIGINT) on the broker waited out uvicorn's graceful-shutdown
timeout, then cancelled the fetch with a traceback in the log.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from typing import Any

import httpx
import pytest

from tests.integration.broker.conftest import BrokerClient, BrokerFactory

FETCH = "/v1/topics/t/n/lp/subscriptions/s/messages"
LONG_MS = 25_000  # longer than any wait below: a poll that ends did not time out


def open_polls(broker: BrokerClient) -> float:
    for line in broker.http.get("/metrics").text.splitlines():
        if line.startswith("streamtx_long_polls_open "):
            return float(line.split()[1])
    raise AssertionError("no streamtx_long_polls_open gauge")


def wait_until(cond: Any, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("lane", [True, False])
def test_fetch_ends_when_its_client_disconnects(broker_factory: BrokerFactory, lane: bool) -> None:
    """In the fast lane and in FastAPI's route alike."""
    broker = broker_factory(fast_lane=lane)
    broker.create_topic("lp", 1)
    broker.subscribe("lp", "s")
    sock = socket.create_connection(("127.0.0.1", broker.proc.port))
    sock.sendall(f"GET {FETCH}?wait_ms={LONG_MS} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
    wait_until(lambda: open_polls(broker) == 1, "the fetch to wait")
    sock.close()
    wait_until(lambda: open_polls(broker) == 0, "the fetch to end after its client left")
    # Nothing was taken by the abandoned fetch: the next one gets what is produced.
    broker.produce("lp", ["after"])
    assert [m["value"] for m in broker.fetch("lp", "s", wait_ms=5000, consumer="d")] == ["YWZ0ZXI="]


def test_fetch_ends_when_the_broker_stops(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    broker.create_topic("lp", 1)
    broker.subscribe("lp", "s")
    got: dict[str, Any] = {}

    def fetch() -> None:
        try:
            r = httpx.get(f"{broker.proc.url}{FETCH}", params={"wait_ms": LONG_MS}, timeout=60)
            got["answer"] = (r.status_code, r.json())
        except httpx.HTTPError as exc:
            got["answer"] = repr(exc)

    thread = threading.Thread(target=fetch)
    thread.start()
    wait_until(lambda: open_polls(broker) == 1, "the fetch to wait")
    assert broker.proc.proc is not None
    broker.proc.proc.send_signal(signal.SIGINT)  # Ctrl-C on `make run`
    thread.join(30)
    assert got["answer"] == (200, {"messages": []})  # answered, not cut off
    # uvicorn stops cleanly, then re-raises the signal so the exit status says SIGINT.
    assert broker.proc.proc.wait(30) in (0, -signal.SIGINT)
    log = broker.proc.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "CancelledError" not in log, log[-3000:]
