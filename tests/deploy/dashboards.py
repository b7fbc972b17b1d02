"""The repo's Grafana dashboards (charts/streamtx/files/dashboards/*.json, one source for
docker-compose and the Helm chart): loading them and expanding their queries."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.prometheus import Prometheus

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "charts" / "streamtx" / "files" / "dashboards"


def load() -> dict[str, dict[str, Any]]:
    """Every dashboard by file name: adding one is dropping a JSON file in :data:`DIR`."""
    return {p.name: json.loads(p.read_text()) for p in sorted(DIR.glob("*.json"))}


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows' collapsed panels included (rows themselves too)."""
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries(board: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) of every target."""
    for panel in panels(board):
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def expand(expr: str, values: dict[str, str], rate_interval: str) -> str:
    """The query Grafana would send: variables replaced, ``$__rate_interval`` and co given."""
    out = expr.replace("$__rate_interval", rate_interval).replace("$__interval", rate_interval)
    out = out.replace("$__range", rate_interval)

    def var(m: re.Match[str]) -> str:
        return values[m.group(1) or m.group(2)]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", var, out)


def empty_queries(prom: Prometheus, name: str, board: dict[str, Any], values: dict[str, str],
                  start: float, end: float, rate_interval: str) -> tuple[int, list[str]]:
    """Every panel query of ``board`` over [start, end] through Prometheus's HTTP API (raises if
    one does not parse): how many were checked, and those that returned no data."""
    empty, checked = [], 0
    for title, expr in queries(board):
        query = expand(expr, values, rate_interval)
        result = prom.query_range(query, start, end)
        points = [float(v) for series in result for _, v in series["values"]]
        if not any(p == p for p in points):  # every value NaN, or none at all
            empty.append(f"{name} / {title}: {query}")
        checked += 1
    return checked, empty


def variables_without_values(prom: Prometheus, name: str, board: dict[str, Any], start: float,
                             end: float) -> list[str]:
    """The query variables (``label_values(metric, label)``) with no value over [start, end];
    the variables they refer to are expanded to "All"."""
    every = {v["name"]: ".+" for v in board["templating"]["list"]}
    missing = []
    for var in board["templating"]["list"]:
        if var["type"] != "query":
            continue
        inner = var["query"]["query"].removeprefix("label_values(").removesuffix(")")
        metric, _, label = inner.rpartition(",")
        metric = expand(metric.strip(), every, "10s")
        got = prom.api(f"label/{label.strip()}/values", **{"match[]": metric, "start": start, "end": end})
        if not got:
            missing.append(f"{name}: ${var['name']}")
    return missing
