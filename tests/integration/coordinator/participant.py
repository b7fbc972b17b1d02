"""A real HTTP participant for coordinator tests: the broker's and the pending-ack
store's transaction endpoints (docs/internal-api.md), recording every call and
failing on demand.

It runs on uvicorn in a thread of the test process, on a free port, so the
coordinator process reaches it over real HTTP while the test reads its state
directly.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from tests.support.procs import free_port, wait_for_port


@dataclass
class Participant:
    """What the participant saw, and how it misbehaves. Mutate it from the test."""

    url: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)
    fail_next: int = 0  # answer the next N calls with 503
    fail_ends: int = 0  # answer the next N end calls (not prepares) with 503
    down: bool = False  # answer every call with 503
    conflict_txns: set[str] = field(default_factory=set)  # prepare answers 409 for these
    delay_s: float = 0.0  # sleep before answering an end (to catch the TC mid-fan-out)
    ended_other_way: set[str] = field(default_factory=set)  # partition ends of these answer 409
    fenced_ends: int = 0  # answer the next N partition ends with 409 "fenced" (a broker that lost its ledger)
    gone: set[str] = field(default_factory=set)  # partition ends for these partitions answer 404
    malformed: set[str] = field(default_factory=set)  # partition ends for these partitions answer 400
    slow_ends: int = 0  # the next N partition ends answer only after slow_s (past the TC's request timeout)
    slow_s: float = 0.0
    # (txn, "partition"|"subscription", name) -> the first action applied; a
    # different later action is a violation of atomicity.
    ended: dict[tuple[str, str, str], str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.calls.clear()
            self.ended.clear()
            self.violations.clear()
            self.conflict_txns.clear()
            self.ended_other_way.clear()
            self.fenced_ends = 0
            self.gone.clear()
            self.malformed.clear()
            self.slow_ends, self.slow_s = 0, 0.0
            self.fail_next, self.fail_ends, self.down, self.delay_s = 0, 0, False, 0.0

    def _failing(self, end: bool = False) -> bool:
        with self.lock:
            if self.down:
                return True
            if self.fail_next > 0:
                self.fail_next -= 1
                return True
            if end and self.fail_ends > 0:
                self.fail_ends -= 1
                return True
            return False

    def _end(self, txn: str, kind: str, name: str, action: str) -> None:
        with self.lock:
            first = self.ended.setdefault((txn, kind, name), action)
            if first != action:
                self.violations.append(f"{txn} {kind} {name}: {action} after {first}")

    def actions(self, txn: str) -> dict[tuple[str, str], str]:
        """(kind, name) -> action applied, for one transaction."""
        with self.lock:
            return {(k, n): a for (t, k, n), a in self.ended.items() if t == txn}

    def count(self, path: str, txn: str | None = None, status: int | None = None) -> int:
        with self.lock:
            return sum(
                1 for c in self.calls
                if c["path"] == path and (txn is None or c["txn_id"] == txn)
                and (status is None or c["status"] == status)
            )


def build_app(p: Participant) -> FastAPI:
    app = FastAPI()

    def unavailable() -> JSONResponse:
        return JSONResponse({"error": "unavailable", "message": "injected"}, status_code=503)

    def record(path: str, body: dict[str, Any], status: int) -> None:
        with p.lock:
            p.calls.append({"path": path, "status": status, "at": time.monotonic(), **body})

    @app.post("/v1/txn/partitions/end")
    async def partition_end(body: dict[str, Any]) -> Any:
        if p.delay_s:
            await asyncio.sleep(p.delay_s)  # a slow participant: the TC is caught mid-fan-out
        with p.lock:
            slow = p.slow_ends > 0
            p.slow_ends -= slow
        if slow:  # answers 503 once slow_s passed: only a retry can end the txn
            record("partitions/end slow", body, 0)
            await asyncio.sleep(p.slow_s)
            record("partitions/end slow", body, 503)
            return unavailable()
        if p._failing(end=True):
            record("partitions/end", body, 503)
            return unavailable()
        if body["partition"] in p.gone:  # as a broker answers for a deleted topic
            record("partitions/end", body, 404)
            return JSONResponse({"error": "not_found", "message": "topic deleted"}, status_code=404)
        if body["partition"] in p.malformed:  # as a broker answers a name that is no partition's
            record("partitions/end", body, 400)
            return JSONResponse({"error": "malformed", "message": "not a partition name"}, status_code=400)
        with p.lock:
            fenced = p.fenced_ends > 0
            p.fenced_ends -= fenced
        if fenced:
            record("partitions/end", body, 409)
            return JSONResponse({"error": "fenced", "message": "writer fenced"}, status_code=409)
        if body["txn_id"] in p.ended_other_way:  # as the broker answers after its checker aborted
            record("partitions/end", body, 409)
            return JSONResponse({"error": "conflict", "message": f"txn {body['txn_id']} already ended "
                                 "here: the other way"}, status_code=409)
        p._end(body["txn_id"], "partition", body["partition"], body["action"])
        record("partitions/end", body, 200)
        return {**body, "marker": None}

    @app.post("/v1/txn/subscriptions/prepare")
    async def subscription_prepare(body: dict[str, Any]) -> Any:
        if p._failing():
            record("subscriptions/prepare", body, 503)
            return unavailable()
        if body["txn_id"] in p.conflict_txns:
            record("subscriptions/prepare", body, 409)
            return JSONResponse(
                {"error": "conflict", "message": "acked positions overlap a committed transaction"},
                status_code=409,
            )
        record("subscriptions/prepare", body, 200)
        return {"txn_id": body["txn_id"], "topic": body["topic"], "subscription": body["subscription"]}

    @app.post("/v1/txn/subscriptions/end")
    async def subscription_end(body: dict[str, Any]) -> Any:
        if p.delay_s:
            await asyncio.sleep(p.delay_s)
        if p._failing(end=True):
            record("subscriptions/end", body, 503)
            return unavailable()
        name = f"{body['topic']}|{body['subscription']}"
        p._end(body["txn_id"], "subscription", name, body["action"])
        record("subscriptions/end", body, 200)
        return body

    return app


@contextmanager
def running_participant() -> Iterator[Participant]:
    """Serve a participant on a free port in a thread; yields it with its ``url`` set."""
    p = Participant()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(build_app(p), host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, name="participant", daemon=True)
    thread.start()
    wait_for_port(port)
    p.url = f"http://127.0.0.1:{port}"
    try:
        yield p
    finally:
        server.should_exit = True
        thread.join(10)
