"""A real Prometheus (Debian's, installed by `make setup`) scraping local services, for tests.

    with prometheus_server(config, tmp) as prom:
        prom.query_range("up", start, end)

``config`` is a Prometheus configuration (a dict); the server listens on a free
port of 127.0.0.1 and keeps its TSDB under ``tmp``.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.procs import free_port, stop


def binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found: run `make setup` (apt-get install prometheus)")
    return found


class Prometheus:
    """A running server's HTTP API (query, query_range, labels, rules, targets)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=30)

    def api(self, path: str, **params: Any) -> Any:
        body = self.http.get(f"/api/v1/{path}", params=params).json()
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body}")
        return body["data"]

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> list[dict[str, Any]]:
        data = self.api("query_range", query=expr, start=start, end=end, step=step)
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait_scraped(self, jobs: set[str], since: float, timeout_s: float = 30.0) -> None:
        """Until every target of ``jobs`` is up and was last scraped after ``since``."""
        deadline = time.monotonic() + timeout_s
        while True:
            targets = [t for t in self.api("targets")["activeTargets"] if t["labels"]["job"] in jobs]
            fresh = [t for t in targets if t["health"] == "up" and _epoch(t["lastScrape"]) > since]
            if targets and len(fresh) == len(targets):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"targets not scraped since {since}: {targets}")
            time.sleep(0.2)


def _epoch(rfc3339: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


@contextlib.contextmanager
def prometheus_server(config: dict[str, Any], tmp: Path) -> Iterator[Prometheus]:
    port = free_port()
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    with (tmp / "prometheus.log").open("wb") as log:  # the child keeps its own copy
        proc = subprocess.Popen(
            [binary("prometheus"), f"--config.file={path}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle"],
            stdout=log, stderr=log,
        )
    prom = Prometheus(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(tmp / 'prometheus.log').read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if prom.http.get("/-/ready").status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError("prometheus not ready after 30 s")
            time.sleep(0.2)
        yield prom
    finally:
        prom.http.close()
        stop(proc)
