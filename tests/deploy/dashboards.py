"""The repo's Grafana dashboards (charts/streamtx/files/dashboards/*.json, one source for
docker-compose and the Helm chart): loading them and expanding their queries."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
