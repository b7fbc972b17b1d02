"""Several clusters, each a whole suite of real processes with its own file ledgers, connected.

    with Geo(tmp_path, ("a", "b", "c")) as geo:
        geo.url("a")                     # the broker of cluster a (a client starts there)
        geo["b"].replication.kill9()     # crash one controller, then .start() it again

Every cluster registers the others as peers (``PUT /admin/v2/clusters/{name}``).
"""

from __future__ import annotations

import asyncio
import base64
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from tests.support.suite import ORDER, Suite

#: Settings that make replication and snapshots quick to observe in tests.
FAST = {"STREAMTX_SCAN_INTERVAL_S": "0.2", "STREAMTX_RETRY_MAX_S": "0.5", "STREAMTX_READ_WAIT_MS": "300"}


class Geo:
    """Clusters by name; each one's services start in :data:`ORDER`, the replication controller last."""

    def __init__(self, root: Path, names: tuple[str, ...] = ("a", "b", "c"), *,
                 replication_env: dict[str, str] | None = None,
                 ledger_url: Callable[[str], str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.names = names
        self.suites: dict[str, Suite] = {}
        for name in names:
            logs = root / f"logs-{name}"
            logs.mkdir(parents=True, exist_ok=True)
            # Partition ledgers are named by topic alone: each cluster has its own store.
            url = ledger_url(name) if ledger_url else f"file://{root / name}"
            self.suites[name] = Suite(url, logs, services=ORDER,
                                      env={"STREAMTX_CLUSTER": name, **(env or {})},
                                      replication_env={**FAST, **(replication_env or {})})

    def __getitem__(self, name: str) -> Suite:
        return self.suites[name]

    def url(self, name: str) -> str:
        return self.suites[name].broker.url

    def start(self) -> Geo:
        try:
            # Clusters start side by side (each one's services in order): a third of the wait.
            with ThreadPoolExecutor(len(self.suites)) as pool:
                for done in [pool.submit(suite.start) for suite in self.suites.values()]:
                    done.result()
            for name in self.names:
                for peer in self.names:
                    if peer != name:
                        r = httpx.put(f"{self.url(name)}/admin/v2/clusters/{peer}",
                                      json={"service_url": self.url(peer)}, timeout=30)
                        r.raise_for_status()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for suite in self.suites.values():
            suite.stop()

    def __enter__(self) -> Geo:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


async def drain(url: str, topic: str, sub: str, expected: int, timeout_s: float = 60.0
                ) -> list[dict[str, Any]]:
    """Everything a new ``earliest`` subscription receives until ``expected`` arrived (acked as it goes)."""
    out: list[dict[str, Any]] = []
    base = f"/v1/topics/{topic}/subscriptions/{sub}"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        # The controller creates a replicated topic in the other clusters when it starts
        # on it: wait for it there rather than race it.
        while (r := await http.put(base, json={"initial_position": "earliest"})).status_code == 404:
            if loop.time() > deadline:
                break
            await asyncio.sleep(0.1)
        assert r.status_code == 200, r.text
        while len(out) < expected and loop.time() < deadline:
            r = await http.get(f"{base}/messages", params={"max": 500, "wait_ms": 300})
            msgs = r.json()["messages"]
            if msgs:
                out += msgs
                r = await http.post(f"{base}/acks", json={"message_ids": [m["message_id"] for m in msgs]})
                assert r.status_code == 200, r.text
        # Anything beyond the expected count (a duplicate, a loop) would arrive now.
        r = await http.get(f"{base}/messages", params={"max": 500, "wait_ms": 500})
        out += r.json()["messages"]
    return out


def check_exactly_once_in_order(cluster: str, got: list[dict[str, Any]], sources: list[str],
                                requests: int, per_request: int) -> None:
    values = [base64.b64decode(m["value"]).decode() for m in got]
    assert len(values) == len(set(values)), f"{cluster}: duplicates"
    expected = {f"{c}-{s}-{j}" for c in sources for s in range(requests) for j in range(per_request)}
    assert set(values) == expected, f"{cluster}: missing {sorted(expected - set(values))[:5]}"
    by_stream: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for m, v in zip(got, values, strict=True):
        source, seq, j = v.split("-")
        by_stream[(source, m["partition"])].append((int(seq), int(j)))
        # Replicated messages name where they were written; local ones do not.
        assert m.get("replicated_from") == (None if source == cluster else source), (cluster, m)
    for stream, order in by_stream.items():
        assert order == sorted(order), f"{cluster}: {stream} out of source order"


async def post_until_stored(http: httpx.AsyncClient, path: str, body: dict[str, Any], what: str,
                            pause_s: float = 0.2) -> None:
    """POST a named producer's request again (same sequence: stored once) until it is stored;
    a 4xx fails the test, a 5xx or a connection error (a broker down, a partition moving) is retried."""
    last = ""
    for _ in range(300):
        try:
            r = await http.post(path, json=body)
            if r.status_code == 200:
                return
            assert r.status_code >= 500, r.text
            last = r.text
        except httpx.HTTPError as exc:
            last = repr(exc)
        await asyncio.sleep(pause_s)
    raise AssertionError(f"{what} kept failing: {last}")
