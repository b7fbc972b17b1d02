"""Every ``streamtx-admin`` and ``streamtx`` call in a shell block of the docs parses with the CLI's
own parser, the blocks the doc-commands test does not run included (issue 24 item 5: the README's
``coordinator internal 0``, ``txn 0:0`` and ``slow 1000`` did not)."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from streamtx.cli import build_parser as streamtx_parser
from streamtx.client.admin_cli import build_parser as admin_parser
from tests.support.docs import code_blocks, invocations
from tests.support.procs import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         ROOT / "shared/streamtx/demo/README.md", ROOT / "services/streamtx/broker/README.md"]
PARSERS = {"streamtx-admin": admin_parser, "streamtx": streamtx_parser}


def _refusal(parser: argparse.ArgumentParser, args: list[str]) -> str | None:
    """What the parser says when it refuses ``args`` (None: accepted)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            if parser.prog == "streamtx" and args[:1] in (["suite"], ["jobs"]):
                return None  # they parse their own options (streamtx.cli.main), not checked here
            parser.parse_args(args)
        except SystemExit as exit_:
            return err.getvalue().strip().splitlines()[-1] if exit_.code else None
    return None


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_every_documented_call_parses(command: str) -> None:
    refused, seen = [], 0
    for page in PAGES:
        for block in code_blocks(page.read_text()):
            for args in invocations(block, command):
                seen += 1
                if (why := _refusal(PARSERS[command](), args)) is not None:
                    refused.append(f"{page.relative_to(ROOT)}: {command} {' '.join(args)}: {why}")
    assert seen, f"no {command} call found in the docs"
    assert not refused, "\n".join(refused)


def test_the_check_refuses_what_the_old_readme_said() -> None:
    for args in (["coordinator", "internal", "0"], ["txn", "0:0"], ["slow", "1000"]):
        assert _refusal(admin_parser(), args) is not None, args
    block = "x=$(streamtx-admin txn metadata $T | jq .)  # streamtx-admin gone\nhelm install streamtx c/\n"
    assert invocations(block, "streamtx-admin") == [["txn", "metadata", "1"]]
    assert invocations(block, "streamtx") == []
