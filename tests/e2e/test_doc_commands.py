"""Every documented command runs (issue 24 item 5).

The blocks of README.md and docs/*.md marked ``<!-- run -->`` run against one suite
started as ``make run`` starts it (``python -m streamtx.launch.suite``, a temporary
data directory, free ports as ``BASE_PORT``): each file's blocks in order in one
``bash -Eeuo pipefail`` (a block may use what an earlier one set), from a folder whose
``data/`` is the suite's, with this venv's ``bin`` first on the PATH, as the README
asks a reader to put ``.venv/bin``. ``curl`` fails on an HTTP error here
(``--fail-with-body``), so a command the API refuses fails its file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.docs import marked_blocks
from tests.support.docsuite import made_run, promised, run_blocks
from tests.support.procs import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = [path for path in DOCS if marked_blocks(path)]


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    work = tmp_path_factory.mktemp("doc-commands")
    with made_run(work) as base:
        yield work, base


@pytest.mark.parametrize("doc", RUNNABLE, ids=[p.name for p in RUNNABLE])
def test_the_documented_commands_run(suite: tuple[Path, int], doc: Path) -> None:
    work, base = suite
    # docs/security.md's blocks run in the shell where a reader exported the suite's secret (auth on:
    # tests/e2e/test_auth.py); here, on an auth-off suite, its tokens are made and not needed.
    secret = {"STREAMTX_AUTH_JWT_SECRET": "d" * 64} if doc.name == "security.md" else {}
    run_blocks(marked_blocks(doc), work, {"BASE_PORT": str(base), **secret})


def test_the_readme_tour_runs_again_and_prints_what_it_promises(tmp_path: Path) -> None:
    # A reader tries the tour twice, and again after restarting make run: nothing in it may hold
    # for a fresh data directory only (the hard-coded transaction id 0:0 did: a second run
    # registered a partition in a committed one; the never-acked `reader` subscription did: a
    # restarted suite handed it back the earlier runs' values, 9 or 12 where the tour promises 3).
    blocks = marked_blocks(ROOT / "README.md")
    promises = promised(blocks)
    assert promises, "the tour's print(...) lines say what they print in a comment under them"
    for life, runs in (("fresh", 2), ("restarted", 2)):
        with made_run(tmp_path) as base:  # the same data/ both times
            for attempt in range(runs):
                printed = run_blocks(blocks, tmp_path, {"BASE_PORT": str(base)}).stdout.splitlines()
                for promise in promises:
                    assert promise in printed, (life, attempt, promise, printed[-20:])


def test_the_readme_tour_runs() -> None:
    # The README's tour is what a reader runs first: it must stay marked.
    assert ROOT / "README.md" in RUNNABLE
    assert any("/v1/transactions" in b.code for b in marked_blocks(ROOT / "README.md"))
