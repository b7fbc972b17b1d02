"""Services call each other through the one transport client (streamtx.transport.HttpClient).

Its keep-alive pool, retry policy, 307 following and error decoding were missing
from the raw httpx clients the broker replicas made (spread.py, and fanout.py one
per call) and the replication admin proxy (one made inside a route, never closed).
"""

from __future__ import annotations

import ast
from pathlib import Path

import streamtx

#: Where an httpx client may be made: the transport itself, and the SDK's shared pool.
ALLOWED = {"transport/http.py", "client/client.py"}


def test_no_module_makes_an_httpx_client_of_its_own() -> None:
    modules: dict[str, Path] = {}
    for folder in streamtx.__path__:  # the first folder's module wins, as on import
        for path in Path(folder).rglob("*.py"):
            modules.setdefault(str(path.relative_to(folder)), path)
    made = sorted(f"{name}:{node.lineno}" for name, path in modules.items() if name not in ALLOWED
                  for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in ("AsyncClient", "Client") and isinstance(node.func.value, ast.Name)
                  and node.func.value.id == "httpx")
    assert made == []
