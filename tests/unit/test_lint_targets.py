"""`make lint` checks every folder the ``streamtx`` package is made of (issue 24 item 3).

The wheel maps ``shared/``, ``services/`` and ``spark-jobs/`` onto the one
package; a folder ruff or mypy is not given goes unchecked (spark-jobs was
never type-checked: ten errors when it first was).
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _lint_commands() -> dict[str, list[str]]:
    recipe = re.search(r"^lint:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert recipe, "no lint target in the Makefile"
    commands = [shlex.split(line.strip()) for line in recipe.group(1).splitlines()]
    return {Path(c[0]).name: c[1:] for c in commands}


def test_make_lint_checks_every_package_folder() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = set(project["tool"]["hatch"]["build"]["targets"]["wheel"]["sources"])
    assert folders == {"shared", "services", "spark-jobs"}
    commands = _lint_commands()
    assert folders <= set(commands["mypy"]), commands["mypy"]
    assert folders <= set(commands["ruff"]), commands["ruff"]
    # mypy resolves the folders' modules as streamtx.* through mypy_path
    assert folders <= set(project["tool"]["mypy"]["mypy_path"].split(":"))
