"""The README and docs/ link to files and headings that exist: every hop lands (issue 24 item 4)."""

from __future__ import annotations

import re

from tests.support.docs import anchors, links
from tests.support.procs import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_relative_link_lands_on_a_file_and_heading_that_exist() -> None:
    broken = []
    for page in PAGES:
        for target in links(page.read_text()):
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_readme_reaches_the_services_ledgers_ownership_replication_and_spark_in_one_hop() -> None:
    readme = (ROOT / "README.md").read_text()
    hops = set(links(readme))
    for folder in ("services/streamtx/coordinator/", "services/streamtx/broker/",
                   "services/streamtx/pendingack/", "services/streamtx/replication/",
                   "shared/streamtx/ledger/", "shared/streamtx/ownership/", "spark-jobs/"):
        assert folder in hops, folder
    for page in ("docs/architecture.md#the-four-services", "docs/architecture.md#the-ledger-layer",
                 "docs/geo-replication.md", "docs/spark.md", "docs/scaling.md"):
        assert page in hops, page


def test_anchors_are_githubs() -> None:
    text = "# A b\n## Several workers (`STREAMTX_WORKERS`)\n```sh\n# not a heading\n```\n### What's new?\n"
    assert anchors(text) == {"a-b", "several-workers-streamtx_workers", "whats-new"}
    assert links("[x](a.md#b) [y](https://e.org) ![i](img.png) [z](#c)") == ["a.md#b", "img.png", "#c"]
    assert re.fullmatch(r"[\w-]+", "several-workers-streamtx_workers")
