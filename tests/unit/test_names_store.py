"""``store`` means a pending-ack store (``PendingAckStore``) and nothing else.

A ledger factory is ``ledgers``, a policy store ``policy_store``, a lease store
``leases``: in one file ``store`` was each of them, and a reader had to find the
assignment to know which (issue 24).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OTHERS = {"LedgerFactory", "FileLedgerFactory", "MemoryLedgerFactory", "KafkaLedgerFactory", "PolicyStore",
          "LeaseStore", "open_ledger_factory"}


def _names(node: ast.AST) -> set[str]:
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
            if isinstance(n, ast.Name | ast.Attribute)}


def misnamed(source: str) -> list[int]:
    """Lines where ``store``/``_store`` names something that is not a pending-ack store."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.arg) and node.arg in ("store", "_store") and node.annotation is not None:
            if _names(node.annotation) & OTHERS:
                out.append(node.lineno)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            named = any((isinstance(t, ast.Name) and t.id in ("store", "_store"))
                        or (isinstance(t, ast.Attribute) and t.attr in ("store", "_store")) for t in targets)
            if named and node.value is not None and _names(node.value) & OTHERS:
                out.append(node.lineno)
    return out


def test_the_finder_sees_each_kind() -> None:
    assert misnamed("def f(store: LedgerFactory) -> None: ...") == [1]
    assert misnamed("store = open_ledger_factory('memory://')") == [1]
    assert misnamed("self._store = LeaseStore.from_url(u)") == [1]
    assert misnamed("store = await PendingAckStore.open(ledgers, 't', 's')") == []


def test_store_is_only_ever_a_pending_ack_store() -> None:
    folders = ("shared", "services", "spark-jobs", "tests", "bench", "tools")
    found = {str(p.relative_to(ROOT)): lines for d in folders
             for p in (ROOT / d).rglob("*.py") if (lines := misnamed(p.read_text()))}
    assert found == {}
