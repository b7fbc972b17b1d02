"""The README and docs/ as the tests read them: the blocks marked to run, the layout table. Pure.

A block runs when the line before its opening fence is ``<!-- run -->`` (invisible
on GitHub); only ``sh`` and ``python`` blocks may be marked. The layout table is
the table under the README's ``## Layout``: a row names a folder by its full path
in backticks (``shared/streamtx/ledger/``), and its subfolders by their last
part after it (``services/streamtx/broker/`` ... ``routes/``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

RUN_MARK = "<!-- run -->"
RUNNABLE = ("sh", "python")
#: Where the project's packages live; the tests require each folder under them in the layout.
PACKAGE_ROOTS = ("shared/streamtx", "services/streamtx", "spark-jobs/streamtx")

_FENCE = re.compile(r"^```(\w*)\s*$")
_FULL = re.compile(r"`((?:shared|services|spark-jobs)/[\w./-]*/)`")
_SHORT = re.compile(r"`([\w-]+/)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


@dataclass(frozen=True)
class Block:
    """One marked code block: where it starts (the fence's line, 1-based), its language, its text."""

    path: Path
    line: int
    lang: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"


def marked_blocks(path: Path) -> list[Block]:
    """The blocks of ``path`` marked to run, in order; a mark on anything else is an error."""
    lines = path.read_text().splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != RUN_MARK:
            continue
        fence = _FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if fence is None or fence.group(1) not in RUNNABLE:
            raise ValueError(f"{path.name}:{i + 1}: {RUN_MARK} must come right before a ```sh or ```python"
                             " fence")
        end = next((j for j in range(i + 2, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise ValueError(f"{path.name}:{i + 2}: the block is never closed")
        blocks.append(Block(path, i + 2, fence.group(1), "\n".join(lines[i + 2:end]) + "\n"))
    return blocks


def layout_rows(readme: str) -> list[str]:
    """The rows of the table under ``## Layout`` (header and rule left out)."""
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return rows[2:]


def named_folders(rows: list[str]) -> set[str]:
    """Every folder the rows name: full paths, and a short ``name/`` after a row's first as its subfolder."""
    named: set[str] = set()
    for row in rows:
        full = list(_FULL.finditer(row))
        named.update(f.group(1).rstrip("/") for f in full)
        if full:  # the short names after the row's first folder are its subfolders
            first = full[0]
            named.update(first.group(1) + s.rstrip("/") for s in _SHORT.findall(row, first.end()))
    return named


def package_folders(root: Path) -> set[str]:
    """Every folder holding Python modules under :data:`PACKAGE_ROOTS` (the roots themselves left out)."""
    found = set()
    for top in PACKAGE_ROOTS:
        for init in (root / top).rglob("*.py"):
            folder = init.parent
            if "__pycache__" not in folder.parts and folder != root / top:
                found.add(folder.relative_to(root).as_posix())
    return found


def links(text: str) -> list[str]:
    """The targets of the markdown links in ``text`` that stay in the repository (no scheme)."""
    return [t for t in _LINK.findall(text) if "://" not in t and not t.startswith("mailto:")]


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of ``text`` (code blocks left out)."""
    found, fenced = set(), False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def code_blocks(text: str, langs: tuple[str, ...] = ("sh",)) -> list[str]:
    """The text of every fenced block of ``text`` in one of ``langs``, marked to run or not."""
    blocks, current = [], None
    for line in text.splitlines():
        fence = _FENCE.match(line)
        if current is None and fence and fence.group(1) in langs:
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("\n".join(current) + "\n")
            current = None
        elif current is not None:
            current.append(line)
    return blocks


_SHELL_OPS = {"|", "||", "&&", ";", "&", "(", "$(", "do", "then", "else", "time", "exec"}
# Expansions stand in for a value the parser cannot check: one word each.
_EXPANSION = re.compile(r"\$\(\([^)]*\)\)|\$\{[^}]*\}|\$\w+")


def invocations(block: str, command: str) -> list[list[str]]:
    """The arguments of every call of ``command`` (by name, or a path ending in it) in a shell block:
    the command word first in a command (after an operator, ``$(``, ``do`` or variable assignments),
    its arguments up to the next operator, each expansion (``$X``, ``${X:-1}``, ``$((...))``) as ``1``."""
    calls = []
    for line in block.replace("\\\n", " ").splitlines():
        line = _EXPANSION.sub("1", line).replace("$(", " $( ")
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # an unclosed quote spanning lines (a python3 -c '...' program)
            continue
        first = True  # the next word starts a command
        for i, word in enumerate(words):
            if first and (word == command or word.endswith("/" + command)):
                args = []
                for arg in words[i + 1:]:
                    if arg in _SHELL_OPS or arg in (")", ";;") or arg.endswith(";"):
                        break
                    args.append(arg)
                calls.append(args)
            if word in _SHELL_OPS or word.endswith(";"):
                first = True
            elif not (first and re.fullmatch(r"\w+=\S*", word)):
                first = False
    return calls
