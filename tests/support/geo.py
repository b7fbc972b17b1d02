"""Several clusters, each a whole suite of real processes with its own file ledgers, connected.

    with Geo(tmp_path, ("a", "b", "c")) as geo:
        geo.url("a")                     # the broker of cluster a (a client starts there)
        geo["b"].replication.kill9()     # crash one controller, then .start() it again

Every cluster registers the others as peers (``PUT /admin/v2/clusters/{name}``).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

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
