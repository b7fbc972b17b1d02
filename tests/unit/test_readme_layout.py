"""The README's layout table names every package folder, and only folders that exist (issue 24 item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.docs import layout_rows, marked_blocks, named_folders, package_folders
from tests.support.procs import ROOT


def test_every_package_folder_is_in_the_layout_table() -> None:
    named = named_folders(layout_rows((ROOT / "README.md").read_text()))
    missing = sorted(package_folders(ROOT) - named)
    assert not missing, f"README.md's layout table does not name: {missing}"


def test_the_layout_table_names_only_folders_that_exist() -> None:
    named = named_folders(layout_rows((ROOT / "README.md").read_text()))
    assert named, "no folder found in README.md's layout table"
    gone = sorted(f for f in named if not (ROOT / f).is_dir())
    assert not gone, f"README.md's layout table names folders that do not exist: {gone}"


def test_a_new_folder_would_be_caught(tmp_path: Path) -> None:
    # The check itself: a package folder the table leaves out is reported, a subfolder named short is not.
    for folder in ("shared/streamtx/ledger", "services/streamtx/broker/routes",
                   "services/streamtx/broker/new"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").touch()
    rows = ["| `shared/streamtx/ledger/` | x |", "| `services/streamtx/broker/` (`routes/`) | y |"]
    assert package_folders(tmp_path) - named_folders(rows) == {"services/streamtx/broker/new"}


MISPLACED_MARKS = ["<!-- run -->\n```\nls\n```\n", "<!-- run -->\nls\n", "<!-- run -->\n```sh\nls\n"]


@pytest.mark.parametrize("text", MISPLACED_MARKS)
def test_a_run_mark_on_anything_but_a_closed_sh_or_python_block_is_an_error(tmp_path: Path,
                                                                            text: str) -> None:
    (tmp_path / "x.md").write_text(text)
    with pytest.raises(ValueError):
        marked_blocks(tmp_path / "x.md")


def test_every_run_mark_in_the_docs_is_on_a_runnable_block() -> None:
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        marked_blocks(path)  # raises on a misplaced mark
