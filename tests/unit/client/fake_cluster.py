"""A fake cluster behind httpx.MockTransport: records every call, answers like docs/api.md."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx

COORDINATOR, BROKER, PENDINGACK = "http://tc:1", "http://broker:2", "http://pa:3"


class FakeCluster:
    def __init__(self, partitions: int = 3) -> None:
        self.partitions = partitions
        self.calls: list[tuple[str, str, Any]] = []  # (method, url without query, json body)
        self.queries: list[str] = []
        self.next_txn = 0
        self.fail: dict[str, tuple[int, dict[str, str]]] = {}  # path suffix -> (status, body)
        self.transport = httpx.MockTransport(self.handle)

    def paths(self) -> list[str]:
        return [f"{m} {u}" for m, u, _ in self.calls]

    def handle(self, request: httpx.Request) -> httpx.Response:
        url = f"{request.url.scheme}://{request.url.host}:{request.url.port}{request.url.path}"
        body: Any = json.loads(request.content) if request.content else None
        self.calls.append((request.method, url, body))
        self.queries.append(request.url.query.decode())
        for suffix, (status, err) in list(self.fail.items()):
            if url.endswith(suffix):
                del self.fail[suffix]
                return httpx.Response(status, json=err)
        path = request.url.path
        if path == "/v1/cluster":
            return httpx.Response(200, json={"cluster": "c1", "services": {
                "coordinator": COORDINATOR, "broker": BROKER, "pendingack": PENDINGACK}})
        if path == "/v1/transactions":
            self.next_txn += 1
            return httpx.Response(200, json={"txn_id": f"0:{self.next_txn}"})
        if path.endswith("/commit"):
            return httpx.Response(200, json={"txn_id": path.split("/")[3], "state": "COMMITTED"})
        if path.endswith("/abort"):
            return httpx.Response(200, json={"txn_id": path.split("/")[3], "state": "ABORTED"})
        if path.endswith("/partitions") and request.method == "GET":
            return httpx.Response(200, json={"partitions": self.partitions})
        if path.endswith("/messages") and request.method == "POST":
            n = len(body["messages"])
            return httpx.Response(200, json={"message_ids": [f"1:{i}" for i in range(n)]})
        if path.endswith("/messages") and request.method == "GET":
            return httpx.Response(200, json={"messages": [{
                "message_id": "5:6", "partition": 1, "key": "k",
                "value": base64.b64encode(b"hello").decode(), "properties": {"a": "b"},
                "publish_time": 123,
            }]})
        return httpx.Response(200, json={"ok": True, "path": path, "query": str(request.url.query)})
