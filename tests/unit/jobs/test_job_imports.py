"""The Spark jobs read the services' ledgers through the shared record codecs only (issue 24).

A job that imports a service module reads with whatever that service happens to
hold, and breaks when the service is refactored (or is not shipped with the
jobs): every record codec and replay rule the jobs need is in ``streamtx.records``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SERVICES = ("streamtx.broker", "streamtx.coordinator", "streamtx.pendingack", "streamtx.replication")
JOB_FILES = sorted((ROOT / "spark-jobs").rglob("*.py"))


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return names


def test_there_are_job_files() -> None:
    assert len(JOB_FILES) > 5


@pytest.mark.parametrize("path", JOB_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_job_imports_no_service_module(path: Path) -> None:
    bad = [n for n in _imports(path) if n in SERVICES or n.startswith(tuple(s + "." for s in SERVICES))]
    assert not bad, f"{path.relative_to(ROOT)} imports service modules {bad}: use streamtx.records"
