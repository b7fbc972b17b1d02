"""streamtx is the installed package: nothing puts its source folders on the path by hand.

``make setup`` installs the project in editable mode (its folders ``shared/``,
``services/`` and ``spark-jobs/`` become the ``streamtx`` package's), so scripts,
benchmarks and tests import it as any user would; a child process inherits the
same (``tests.support.procs.python_env``). A hand-made path (``sys.path``
edits, ``PYTHONPATH=shared:...``) ran stale code from another checkout silently.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_roots = r"""["'/ ]*(?:shared|services|spark-jobs)\b"""
HAND_MADE = re.compile(
    rf"(?:sys\.path\b.*{_roots}|PYTHONPATH.*{_roots}|pythonpath\s*=.*{_roots}|"
    rf"{_roots}:(?:shared|services|spark-jobs)|"
    rf"for \w+ in \(\s*\"(?:shared|services|spark-jobs)\",)"
)

#: Where naming the folders is the point, not an import path.
ALLOWED = {
    # runs an OLDER checkout's code on purpose (comparing two commits)
    "bench/bounded.py": ["cd /tmp/old && PYTHONPATH=shared:services:. python /path/to/bench/bounded.py"],
    # mypy maps the files it is given to module names through it
    "pyproject.toml": ['mypy_path = "shared:services:spark-jobs"'],
    # checks that the wheel holds each folder's modules
    "tests/deploy/test_package.py": ['for top in ("shared", "services", "spark-jobs")'],
}


def hand_made_paths(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if HAND_MADE.search(line)]


def test_the_finder_sees_each_kind() -> None:
    for line in ('sys.path[:0] = [str(ROOT / p) for p in ("shared", ".")]',
                 'env = {"PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("shared", "services"))}',
                 "export PYTHONPATH := shared:services:spark-jobs:.",
                 'for sub in ("shared", "services", "."):',
                 'pythonpath = ["shared", "services", "spark-jobs", "."]'):
        assert hand_made_paths(line) == [line], line
    assert hand_made_paths('sys.path.insert(0, str(Path(__file__).resolve().parents[1]))') == []


def test_no_script_test_or_config_puts_the_source_folders_on_the_path() -> None:
    files = [*(p for d in ("bench", "tests", "tools", "spark-jobs", "shared", "services")
               for p in (ROOT / d).rglob("*.py") if p != Path(__file__)),
             ROOT / "Makefile", ROOT / "pyproject.toml"]
    found = {str(p.relative_to(ROOT)): lines for p in files if (lines := hand_made_paths(p.read_text()))}
    assert found == ALLOWED
